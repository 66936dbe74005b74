"""Builders shared by the tests: the hosts, facts, GPUs and fake connections a test needs, made one way.

A test asks for what it varies (`gpu(3, "RTX 4090", power_limit=300.0)`, `facts(gpus=gpus(8, "H100"))`,
`host("node1", provision_driver={"version": "550.54.15"})`) and gets a plain healthy default for the rest,
so that each test reads as the difference it is about. Import them as `from builders.gpus import gpu`
(tests/ is on sys.path: tests/conftest.py's folder).
"""

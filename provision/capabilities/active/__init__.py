"""Active acceptance (`provision verify --active`, issue 27): a node proven under load. sampler.py reads what
nvidia-smi samples during the load; judge.py says what those samples show."""

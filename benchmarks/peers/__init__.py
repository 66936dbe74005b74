"""The peers of provision in benchmarks/apply_scale.py: Ansible and pyinfra (see run.py)."""

"""The lab: namespaced cluster nodes and the GPU simulator (gpusim.py) they run as nvidia-smi."""

"""The lab: namespaced cluster nodes and the GPU simulator (gpusim/) they run as nvidia-smi."""

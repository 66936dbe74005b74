"""The lab: namespaced cluster nodes and the GPU simulator (gpusim/) they run as nvidia-smi.

A package of its own beside provision, in the same distribution: it uses provision (its inventory, for `lab up
--like`), and provision never imports it. `provision lab` is cli.lab, which provision's command line finds by the
entry point pyproject.toml declares (group provision.commands)."""

"""Slurm: its packages, the munge key, slurm.conf and gres.conf, the daemons; the node's state as the controller
sees it (verify); container jobs with enroot and pyxis (provision_slurm.containers)."""

from provision.capabilities.capability import Capability
from provision.capabilities.slurm import facts, rules
from provision.capabilities.slurm.settings import SlurmSettings
from provision.capabilities.slurm.pyxis_tasks import EnrootPyxis, PyxisPlugstack
from provision.capabilities.slurm.tasks import MungeKey, SlurmConfig, SlurmDaemons, SlurmPackages

CAPABILITY = Capability(
    name="slurm", settings=SlurmSettings, facts=facts.READER,
    tasks=(SlurmPackages, MungeKey, SlurmConfig, EnrootPyxis, PyxisPlugstack, SlurmDaemons),
    checks=(f"{__name__}.checks", f"{__name__}.checks_pyxis", f"{__name__}.checks_mig"),
    host_rules=rules.RULES, host_refusals=(rules.partition_is_one_word,))

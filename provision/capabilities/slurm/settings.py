"""The slurm block of the inventory: the cluster, its controller, partitions and node roles."""

from __future__ import annotations

import re
from typing import ClassVar, Literal


from provision.capabilities.slurm.pyxis import SlurmContainers
from provision.core.settings import PATH_RULE, AbsolutePath, Block, Command, setting


SLURM_WORD = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


class SlurmSettings(Block):
    """One Slurm cluster: every host whose slurm block names the same controller."""

    telling_fields: ClassVar[frozenset[str]] = frozenset({"controller"})
    generic_fields: ClassVar[frozenset[str]] = frozenset({"cluster_name", "conf_dir", "gpu_type", "provision_command"})

    controller: str | None = setting(None, "a host name from this inventory (where slurmctld runs)",
                                     examples=["head-1"])
    role: Literal["controller", "compute", "both"] | None = setting(
        None, "controller, compute or both", "default: controller on the controller host, compute elsewhere")
    cluster_name: str = setting("cluster", "lower-case letters, digits, _ . -", pattern=SLURM_WORD.pattern)
    partition: str | None = setting(None, "a partition name (default: the host's innermost group)",
                                    pattern=r"^[A-Za-z0-9_.-]+$", examples=["gpu"])
    gpu_type: str | None = setting(None, "a gres type: lower-case letters, digits, _ . - (default from the GPU "
                                   "name: v100, rtx3090, h100)", pattern=SLURM_WORD.pattern, examples=["a100"])
    gres_autodetect: Literal["nvml", "nvidia", "off"] = setting(
        "off", "nvml, nvidia or off", "nvml needs slurmd built with NVML (Debian: slurm-wlm-nvml-plugin)")
    conf_dir: AbsolutePath = setting("/etc/slurm", PATH_RULE)
    health_check_interval: int | None = setting(
        None, "seconds, 10..86400", "slurmd runs `provision verify --local` on each node this often: a node that "
        "fails is drained, and resumed once it passes", ge=10, le=86400, examples=[300])
    health_check_prometheus: AbsolutePath | None = setting(
        None, PATH_RULE, "the health check also writes verify's metrics there (verify --prometheus): a "
        "file in node_exporter's textfile collector directory, e.g. /var/lib/prometheus/node-exporter/provision.prom",
        examples=["/var/lib/node_exporter/provision.prom"])
    health_check_also: AbsolutePath | None = setting(
        None, PATH_RULE, "the site's own checker, run by the health check before verify (LBNL NHC's "
        "/usr/sbin/nhc, a DCGM diag wrapper): while it exits non-zero the node stays drained",
        examples=["/usr/local/sbin/site-health"])
    containers: SlurmContainers | None = setting(
        None, "a mapping: enroot, pyxis (versions), caps, hold, data_dir, runtime_dir",
        "enroot and pyxis pinned on every node, pyxis in the plugin stack: `srun --container-image=IMAGE`",
        examples=[{"enroot": "3.5.0", "pyxis": "0.20.0"}])
    provision_command: Command = setting("provision",
                                         "provision on the nodes: a command on PATH or an absolute path")

    def role_of(self, host_name: str) -> str:
        return self.role or ("controller" if host_name == self.controller else "compute")

    def runs_jobs(self, host_name: str) -> bool:
        """A compute node (slurmd): role compute or both."""
        return self.role_of(host_name) in ("compute", "both")

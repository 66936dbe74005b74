"""The torchrun wrapper of a training cluster, and its sbatch script where the node is in Slurm.

Every host of the launcher's group gets /usr/local/bin/GROUP-torchrun: it loads the NCCL environment file
(when the host has an nccl block: a missing file is an error, never a silent default), then runs torchrun
with the node count of the whole group, this node's GPU count, and the rendezvous on the group's first host.
Run the same command on every node, or submit the sbatch script, which takes those from the allocation.
Beside the wrapper goes provision-allreduce, a smoke test to run through it (or the sbatch script): a real
torch.distributed all-reduce, NCCL on GPUs or gloo on the CPU, that checks its sum and exits non-zero if wrong.
On MIG slices one process per node, on one slice (launcher/mig.py).
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from provision.capabilities import clusters
from provision.capabilities.launcher import mig
from provision.core.plan import BlockTask, Plan
from provision.capabilities.launcher.settings import LauncherSettings
from provision.capabilities.system.files import plan_rendered

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

WRAPPER_TEMPLATE = "torchrun-wrapper.sh.j2"
SBATCH_TEMPLATE = "torchrun.sbatch.j2"
ALLREDUCE_TEMPLATE = "torchrun-allreduce.py.j2"
ALLREDUCE = "provision-allreduce"


def wrapper_path(host: Host) -> str:
    launcher = host.settings.launcher
    return (launcher.wrapper_path if launcher else None) or f"/usr/local/bin/{clusters.launcher_group(host)}-torchrun"


def sbatch_path(host: Host) -> str | None:
    """Beside the wrapper, for hosts that are Slurm nodes."""
    return wrapper_path(host) + ".sbatch" if host.settings.slurm else None


def allreduce_path(host: Host) -> str:
    """The all-reduce smoke test, beside the wrapper: /usr/local/bin/provision-allreduce by default."""
    return posixpath.join(posixpath.dirname(wrapper_path(host)), ALLREDUCE)


def processes_per_node(host: Host, facts: HostFacts) -> tuple[str | None, str]:
    """(torchrun's --nproc-per-node, why not) for this host. "gpu" is the GPU count the inventory intends
    (provision_gpu.count), else the GPUs nvidia-smi names, readable or lost: a card off the bus for a day is a fault
    verify reports, not a reason to rewrite the cluster's launch command for fewer processes."""
    wanted = (host.settings.launcher or LauncherSettings()).nproc_per_node  # no block: its default
    if wanted != "gpu":
        return str(wanted), ""
    intended = host.settings.gpu.count if host.settings.gpu else None
    gpus = intended or len(facts.nvidia.gpus) + len(facts.nvidia.lost)
    if gpus == 0:
        said = facts.nvidia.message or "no GPU"
        return None, f"provision_launcher.nproc_per_node is gpu, and nvidia-smi reads no GPU here ({said}) (nothing written)"
    return str(gpus), ""


class TorchrunLauncher(BlockTask[LauncherSettings]):
    """Playbook: `task: torchrun-launcher` (no parameters)."""

    name = "torchrun-launcher"
    plans_from = frozenset({"nvidia.gpus"})  # how many GPUs (--nproc-per-node gpu), and its own files
    alters = frozenset()  # its files only
    tags = frozenset({"launcher"})
    settings_blocks = frozenset({"launcher"})

    def template_names(self) -> list[tuple[str, str]]:
        return [("task", WRAPPER_TEMPLATE), ("task", SBATCH_TEMPLATE), ("task", ALLREDUCE_TEMPLATE)]

    def file_paths(self, host: Host) -> list[str]:
        if host.settings.launcher is None:
            return []
        return [p for p in (wrapper_path(host), sbatch_path(host), allreduce_path(host)) if p]

    def plan_with(self, host: Host, facts: HostFacts, launcher: LauncherSettings) -> Plan:
        plan = Plan()
        nproc, why_not = processes_per_node(host, facts)
        if nproc is None:
            plan.failed = why_not
            return plan
        found = mig.slices(host, facts)
        spans = mig.spans_slices(nproc, found)
        if spans and found.laid_out:  # the inventory's own contradiction: refused before any host is touched
            plan.problems.append(f"{spans}; {mig.FIX}")
            return plan
        if spans:
            plan.failed, plan.failed_check = f"{spans}; {mig.FIX} (nothing written)", mig.CHECK
            return plan
        everyone = self.cluster.everyone if self.cluster else [host]
        members = clusters.training_cluster(host, everyone) or [host]
        context = {
            "host": host, "name": wrapper_path(host).rsplit("/", 1)[-1], "group": clusters.launcher_group(host),
            "members": [m.name for m in members], "nnodes": len(members), "nproc": nproc,
            "head": members[0].address, "node_rank": [m.name for m in members].index(host.name),
            "wrapper": wrapper_path(host),
            "static": launcher.rdzv_backend == "static",
            "port": launcher.master_port if launcher.rdzv_backend == "static" else launcher.rdzv_port,
            "torchrun": launcher.torchrun, "options": launcher.options, "env": launcher.env,
            "nccl_env": host.settings.nccl.env_file if host.settings.nccl else None,
            "sbatch_path": sbatch_path(host), "allreduce": allreduce_path(host),
            "partition": clusters.partition_of(host) if host.settings.slurm else None,
            "gpus_per_node": 1 if found.any() else int(nproc) if launcher.nproc_per_node == "gpu"
            else len(facts.nvidia.gpus),
            "mig": found.any(),
        }
        files = [(wrapper_path(host), WRAPPER_TEMPLATE, "0755")]
        sbatch = sbatch_path(host)
        files += [(sbatch, SBATCH_TEMPLATE, "0755")] if sbatch else []
        files += [(allreduce_path(host), ALLREDUCE_TEMPLATE, "0755")]
        plan_rendered(plan, self.template_folder(), files, context, facts)
        return plan

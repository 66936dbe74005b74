"""Slurm from the distribution's packages: munge and its key, the daemons, restarted only when their files change.

slurm.conf and gres.conf are written from the whole inventory (provision/capabilities/slurm/conf.py): the same files on every
node of the cluster, also when --limit applies them to one. The order in the site playbook: packages, munge
key, configuration files, daemons.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import yaml

from provision.capabilities import clusters
from provision.core.settings import variable
from provision.capabilities.slurm import conf as slurm_conf
from provision.capabilities.slurm import mig_gres
from provision.capabilities.slurm.pyxis import slurmd_reads
from provision.capabilities.slurm.settings import SlurmSettings
from provision.core.facts import UnitRef
from provision.capabilities.system.apt import APT_INSTALL, APT_UPDATE
from provision.core.plan import BlockTask, Change, FileWrite, Item, OK, Plan
from provision.capabilities.system.files import plan_rendered, plan_written

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts
    from provision.capabilities.system.daemons import DaemonProcess
    from provision.inventory.model import Host

MUNGE_KEY = "/etc/munge/munge.key"
MUNGE_KEY_BYTES = 128  # mungekey's default: 1024 bits


def wanted_packages(slurm: SlurmSettings, host: Host) -> list[str]:
    role = slurm.role_of(host.name)
    return ["munge", "slurm-client", *(["slurmctld"] if role in ("controller", "both") else []),
            *(["slurmd"] if role in ("compute", "both") else [])]


class SlurmTask(BlockTask[SlurmSettings]):
    """A task of the slurm block."""

    settings_blocks = frozenset({"slurm"})


class SlurmPackages(SlurmTask):
    """Playbook: `task: slurm-packages`: munge and slurm-client everywhere, slurmctld on the controller,
    slurmd on compute nodes, from the node's apt sources."""

    name = "slurm-packages"
    tags = frozenset({"slurm", "packages"})
    plans_from = frozenset({"packages"})  # alters anything ("*"): files, users, units, daemons the packages bring

    def package_names(self, host: Host) -> list[str]:
        return wanted_packages(host.settings.slurm, host) if host.settings.slurm else []

    def plan_with(self, host: Host, facts: HostFacts, slurm: SlurmSettings) -> Plan:
        plan = Plan()
        wanted = wanted_packages(slurm, host)
        installed = {name: version for name in wanted if (version := facts.packages.get(name))}
        missing = [name for name in wanted if name not in installed]
        plan.unchanged += [Item(name, OK, "package", after=version) for name, version in installed.items()]
        if missing:
            plan.changes.append(Change(
                target=" ".join(missing), what="package", before="not installed", after="installed",
                commands=[[*APT_INSTALL, *missing]], prepare=[APT_UPDATE],
                verify=lambda f: (None if all(f.packages.get(n) for n in missing)
                                  else "not installed: " + " ".join(n for n in missing if not f.packages.get(n)))))
        return plan


def key_digest(content: bytes | None) -> str | None:
    return hashlib.sha256(content).hexdigest()[:12] if content is not None else None


class MungeKey(SlurmTask):
    """Playbook: `task: munge-key`: every node of a Slurm cluster holds its controller's munge key (owner munge,
    mode 0400). The controller's own key is the cluster's; a controller without one gets a new random key,
    made once per run in memory. The key is never shown, logged or diffed: only a digest prefix is reported."""

    name = "munge-key"
    tags = frozenset({"slurm", "munge"})
    plans_from = frozenset()  # its own file, and the controller's as read before the run
    alters = frozenset()  # its file only

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._new_keys: dict[str, bytes] = {}  # controller -> the key made in this run (same for all its nodes)

    def file_paths(self, host: Host) -> list[str]:
        return [MUNGE_KEY] if host.settings.slurm else []

    def peer_hosts(self, host: Host, everyone: list[Host]) -> list[Host]:
        controller = host.settings.slurm.controller if host.settings.slurm else None
        return [h for h in everyone if h.name == controller]

    def cluster_key(self, controller: str, host: Host, facts: HostFacts) -> tuple[bytes | None, str]:
        """(the key every node of host's cluster must hold, why there is none)."""
        # The controller as read before this run changed anything: installing munge there makes a key of its
        # own mid-run, which must not replace the one its nodes were given.
        source = self.cluster.facts.get(controller) if self.cluster else None
        if source is None and controller == host.name:
            source = facts
        if source is None:
            why = self.cluster.unread.get(controller, "not read") if self.cluster else "not read"
            return None, f"the cluster's munge key is the controller's, and {controller} could not be read ({why})"
        current = source.files.get(MUNGE_KEY)
        if current and current.exists and current.content is None:
            return None, (f"cannot read {MUNGE_KEY} on {controller}: log in as root, or give the login user "
                          "passwordless sudo")
        if current and current.exists and current.content is not None and len(current.content) >= 32:
            return current.content, ""
        if controller == host.name or self.cluster is None or controller in self.cluster.facts:
            # Read in this run: the controller is being set up now, and gets this key like every node.
            return self._new_keys.setdefault(controller, os.urandom(MUNGE_KEY_BYTES)), ""
        return None, f"the controller {controller} has no munge key yet: apply it first (--limit {controller})"

    def plan_with(self, host: Host, facts: HostFacts, slurm: SlurmSettings) -> Plan:
        plan = Plan()
        controller = slurm.controller
        if controller is None:  # refused where the inventory is read (slurm/rules.py): a host built without it
            plan.failed = "provision_slurm.controller is not set"
            return plan
        elsewhere = self.cluster.beyond_reach([controller]) if self.cluster else ""
        if elsewhere:
            plan.skipped = elsewhere
            return plan
        key, why_not = self.cluster_key(controller, host, facts)
        if key is None:
            plan.failed = why_not
            return plan
        current = facts.files.get(MUNGE_KEY)
        have = current.content if current and current.exists else None
        right_owner = current is not None and (current.owner, current.group, current.mode) == ("munge", "munge", "400")
        if have == key and right_owner:
            plan.unchanged.append(Item(MUNGE_KEY, OK, "munge key", after=f"the cluster's (sha256 {key_digest(key)}…)"))
            return plan
        before = ("absent" if not (current and current.exists) else
                  f"another key (sha256 {key_digest(have)}…)" if have != key else
                  f"owner {current.owner}:{current.group} mode {current.mode}")
        plan.changes.append(Change(
            target=MUNGE_KEY, what="munge key", before=before, after=f"the cluster's (sha256 {key_digest(key)}…)",
            write=FileWrite(MUNGE_KEY, base64.b64encode(key).decode(), mode="0400", owner="munge", group="munge",
                            sensitive=True, base64=True),
            verify=lambda f: None if (f.files.get(MUNGE_KEY) and f.files[MUNGE_KEY].content == key)
            else f"{MUNGE_KEY} does not hold the cluster's key after writing it"))
        return plan


CONFIG_TEMPLATES = {"slurm.conf": "slurm.conf.j2", "gres.conf": "gres.conf.j2", "cgroup.conf": "cgroup.conf.j2"}
HEALTH_CHECK = "/usr/local/sbin/provision-health-check"  # slurm.conf's HealthCheckProgram (provision_slurm.health_check_interval)
HEALTH_CHECK_TEMPLATE = "provision-health-check.sh.j2"
ACTIVE_SBATCH = "/usr/local/sbin/provision-verify-active.sbatch"  # the health check with --active, as a job
ACTIVE_SBATCH_TEMPLATE = "provision-verify-active.sbatch.j2"
ACTIVE_VERDICT = "/run/provision/verify-active.json"
NODE_INVENTORY = "/etc/provision/inventory.yaml"  # what the health check verifies the node against
VERDICT = "/run/provision/health-check.json"


def node_inventory(everyone: Iterable[Host]) -> str:
    """The inventory a node's health check reads: every host with its settings blocks and address, no connection
    variables (the check runs --local). Groups are flattened, so what they decided is written out: each host
    sits in its launcher group, with its Slurm partition named."""
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for host in everyone:
        blocks = {variable(block) for block in type(host.settings).model_fields}  # provision_gpu, provision_nccl, ...
        variables = {"ansible_host": host.address, **{k: v for k, v in host.vars.items() if k in blocks}}
        if host.settings.slurm:
            variables[variable("slurm")] = {**variables[variable("slurm")], "partition": clusters.partition_of(host)}
        group = clusters.launcher_group(host) if host.settings.launcher else host.groups[-1]
        groups.setdefault(group, {"hosts": {}})["hosts"][host.name] = variables
    top = groups.pop("all", {})
    tree = {"all": {**top, **({"children": groups} if groups else {})}}
    header = ("# The inventory provision's Slurm health check verifies this node against: written by `provision "
              "apply`.\n")
    return header + yaml.safe_dump(tree, sort_keys=False, default_flow_style=None, width=120)


class SlurmConfig(SlurmTask):
    """Playbook: `task: slurm-config`: slurm.conf, gres.conf (the whole cluster: every node's hardware, read even
    when --limit leaves it out) and this node's cgroup.conf, in provision_slurm.conf_dir."""

    name = "slurm-config"
    tags = frozenset({"slurm", "files"})
    plans_from = frozenset({"cpu", "nvidia.gpus", "mig"})  # and its own files, and the other hosts' facts
    alters = frozenset()  # its files only
    # Every host's copy from the same, current view: the other hosts as this run left them (a MIG layout made in it
    # is in the controller's gres as in the node's own), or slurmctld drains a node whose gres it does not expect.
    waits_for_peers = True

    def template_names(self) -> list[tuple[str, str]]:
        return [("task", template) for template in [*CONFIG_TEMPLATES.values(), HEALTH_CHECK_TEMPLATE,
                                                     ACTIVE_SBATCH_TEMPLATE]]

    @staticmethod
    def health_checked(host: Host) -> bool:
        slurm = host.settings.slurm
        return bool(slurm and slurm.health_check_interval and slurm.role_of(host.name) != "controller")

    def peer_hosts(self, host: Host, everyone: list[Host]) -> list[Host]:
        return clusters.slurm_cluster(host, everyone) if host.settings.slurm else []

    def fact_sections(self, host: Host) -> list[str]:
        # slurm.conf's node lines, cgroup.conf, gres.conf's Cores; MIG devices, gres of their own (mig_gres.py)
        return ["cpu", *mig_gres.SECTIONS] if host.settings.slurm else []

    def file_paths(self, host: Host) -> list[str]:
        if host.settings.slurm is None:
            return []
        return ([f"{host.settings.slurm.conf_dir}/{name}" for name in CONFIG_TEMPLATES]
                + ([HEALTH_CHECK, ACTIVE_SBATCH, NODE_INVENTORY] if self.health_checked(host) else []))

    def plan_with(self, host: Host, facts: HostFacts, slurm: SlurmSettings) -> Plan:
        plan = Plan()
        everyone = self.cluster.everyone if self.cluster else [host]
        elsewhere = self.cluster.beyond_reach(h.name for h in clusters.slurm_cluster(host, everyone)
                                              if h.name != host.name) if self.cluster else ""
        if elsewhere:
            plan.skipped = elsewhere
            return plan
        read = {**(self.cluster.facts if self.cluster else {}), host.name: facts}
        rebooting = rebooting_hosts(host, everyone, read)
        if rebooting:
            plan.skipped = rebooting
            return plan
        context = slurm_conf.slurm_context(host, everyone, read, unread=self.cluster.unread if self.cluster else None,
                                      health_check_program=HEALTH_CHECK)
        if isinstance(context, list):
            plan.failed = "; ".join(context) + " (nothing written)"
            return plan
        files = [(f"{slurm.conf_dir}/{name}", template, "0644") for name, template in CONFIG_TEMPLATES.items()]
        plan_rendered(plan, self.template_folder(), files, context, facts)
        if self.health_checked(host):
            check = {"host": host, "interval": slurm.health_check_interval, "verdict": VERDICT,
                     "verdict_dir": VERDICT.rsplit("/", 1)[0], "inventory": NODE_INVENTORY,
                     "provision": slurm.provision_command,
                     "prometheus": slurm.health_check_prometheus,
                     "also": slurm.health_check_also, "active_verdict": ACTIVE_VERDICT,
                     "active_sbatch": ACTIVE_SBATCH}
            active = {"path": ACTIVE_SBATCH, "check": HEALTH_CHECK, "verdict": ACTIVE_VERDICT,
                      "partition": clusters.partition_of(host)}
            plan_rendered(plan, self.template_folder(), [(HEALTH_CHECK, HEALTH_CHECK_TEMPLATE, "0755")], check, facts)
            plan_rendered(plan, self.template_folder(), [(ACTIVE_SBATCH, ACTIVE_SBATCH_TEMPLATE, "0755")], active, facts)
            plan_written(plan, FileWrite(NODE_INVENTORY, node_inventory(everyone)), facts)
        return plan


def rebooting_hosts(host: Host, everyone: Sequence[Host], read: Mapping[str, HostFacts | None]) -> str:
    """Why slurm.conf waits, or '': a node of the cluster whose new driver waits for its reboot lists no GPU
    (its library and loaded module differ), and the file needs every node's. It stays as it is meanwhile: a
    driver moved under a rolling reboot (apply --reboot through Slurm) changes none of its lines."""
    names = [h.name for h in clusters.slurm_cluster(host, everyone)
             if (f := read.get(h.name)) is not None and f.nvidia.state == "mismatch"]
    return (f"waits for the reboot of {', '.join(names)}: its new driver lists no GPU until then, and slurm.conf "
            "needs them; the file stays as it is") if names else ""


@dataclass(frozen=True)
class Daemon:
    process: str  # as /proc names it
    unit: str  # the packaged systemd unit
    service: str  # its /etc/init.d script, for nodes without a running systemd
    roles: tuple[str, ...]
    reads: tuple[str, ...]  # files that need a restart when they change: munge.key, or names in conf_dir


DAEMONS = (
    Daemon("munged", "munge.service", "munge", ("controller", "compute", "both"), (MUNGE_KEY,)),
    Daemon("slurmctld", "slurmctld.service", "slurmctld", ("controller", "both"), ("slurm.conf",)),
    Daemon("slurmd", "slurmd.service", "slurmd", ("compute", "both"), ("slurm.conf", "gres.conf", "cgroup.conf")),
)


def host_daemons(slurm: SlurmSettings, host: Host) -> list[Daemon]:
    role = slurm.role_of(host.name)
    return [d for d in DAEMONS if role in d.roles]


def daemon_files(slurm: SlurmSettings, daemon: Daemon) -> list[str]:
    pyxis = slurmd_reads(slurm.conf_dir, slurm.containers) if daemon.process == "slurmd" else []
    return [path if path.startswith("/") else f"{slurm.conf_dir}/{path}" for path in daemon.reads] + pyxis


class SlurmDaemons(SlurmTask):
    """Playbook: `task: slurm-daemons`: munged, slurmctld and slurmd enabled at boot and running, restarted when a
    file they read changed after they started. With systemd: systemctl; without (a container, the lab): the
    packages' /etc/init.d scripts through `service`, and the units enabled for the next boot all the same."""

    name = "slurm-daemons"
    tags = frozenset({"slurm", "services"})
    plans_from = frozenset({"units.enabled", "daemons", "system"})  # and the files the daemons read
    alters = frozenset({"units.enabled", "daemons"})

    def unit_names(self, host: Host) -> list[UnitRef]:
        slurm = host.settings.slurm
        return [UnitRef(d.unit) for d in host_daemons(slurm, host)] if slurm else []

    def fact_sections(self, host: Host) -> list[str]:
        return ["daemons"] if host.settings.slurm else []  # their start times, against the files they read

    def file_paths(self, host: Host) -> list[str]:
        slurm = host.settings.slurm
        return sorted({p for d in host_daemons(slurm, host) for p in daemon_files(slurm, d)}) if slurm else []

    def plan_with(self, host: Host, facts: HostFacts, slurm: SlurmSettings) -> Plan:
        plan = Plan()
        for daemon in host_daemons(slurm, host):
            enabled = facts.units.get(daemon.unit) == "enabled"
            running = facts.daemons.get(daemon.process, [])
            changed = newer_files(facts, daemon_files(slurm, daemon), running)
            if enabled and running and not changed:
                plan.unchanged.append(Item(daemon.unit, OK, "daemon", after="enabled, running"))
                continue
            commands = [] if enabled else [["systemctl", "enable", daemon.unit]]
            if not running or changed:
                commands.append(["systemctl", "restart", daemon.unit] if facts.system.systemd_running
                                else ["service", daemon.service, "restart"])
            before = ", ".join(filter(None, ["" if enabled else "not enabled",
                                             "" if running else "not running",
                                             f"{', '.join(changed)} changed since it started" if changed else ""]))
            plan.changes.append(Change(
                target=daemon.unit, what="daemon", before=before,
                after="restarted" if running else "started" if enabled else "enabled and started",
                commands=commands, verify=lambda f, d=daemon: None if f.daemons.get(d.process) else
                f"{d.process} is not running after `{d.service}` was started (its log: /var/log/slurm, or syslog)"))
        return plan


def newer_files(facts: HostFacts, paths: list[str], running: Sequence[DaemonProcess]) -> list[str]:
    """The paths changed after the daemon's oldest process started (none when it is not running)."""
    started = [p.started for p in running if p.started is not None]
    if not started:
        return []
    return [path for path in paths
            if (f := facts.files.get(path)) and f.exists and f.mtime is not None and f.mtime >= min(started)]

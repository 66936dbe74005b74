"""Gather every fact a run needs with ONE remote command per host.

The batch is a POSIX sh script made of sections. Each section runs one
command and is framed by markers carrying a per-run token, so the output of
one command can never be mistaken for a marker. Paths that come from the
inventory are passed as quoted words (shlex.quote), never pasted raw.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from provision.capabilities.gpu import clock_cache
from provision.capabilities.system import daemons
from provision.capabilities.gpu import layout
from provision.capabilities.topology import topo
from provision.capabilities.driver import facts as driver_facts
from provision.capabilities.gpu import smi as gpu_parsers
from provision.capabilities.system import cpu as cpu_facts
from provision.capabilities.host import (AerCounters, FileFacts, HostFacts, Interface, KernelLogFacts, NvidiaFacts,
                                   PcieFacts, RdmaPort, SystemFacts, TopologyFacts, UnitRef)

NVML_MISMATCH = "Driver/library version mismatch"  # nvidia-smi's words (exit 18) when library and module differ
PERSISTENCED_PIDFILE = "/var/run/nvidia-persistenced/nvidia-persistenced.pid"


def clock_records_dir() -> str:
    """Where provision records the locked clocks it set: one file per GPU (see capabilities/gpu/clocks.py). On tmpfs,
    so a reboot clears it as it clears the locks. PROVISION_CLOCK_RECORDS moves it (tests on this machine)."""
    return os.environ.get("PROVISION_CLOCK_RECORDS", "/run/provision/gpu-clocks")


# The network as NCCL sees it: `ip -j addr` (flags and addresses: NCCL takes only running interfaces with an
# address), then per interface its operstate, speed in Mb/s (empty or -1 where the link is down or has none)
# and PCI device, then each RDMA port (NCCL_IB_HCA names them). One word per field: parse_network reads them.
NET_SNIPPET = (
    "j=$(ip -j addr show 2>/dev/null) && echo \"ip $j\"; "
    "for d in /sys/class/net/*; do printf 'sys %s %s %s %s\\n' \"${d##*/}\" \"$(cat \"$d/operstate\" 2>/dev/null)\" "
    "\"$(cat \"$d/speed\" 2>/dev/null || echo -)\" \"$(readlink -f \"$d/device\" 2>/dev/null || echo -)\"; done; "
    "for p in /sys/class/infiniband/*/ports/*; do [ -d \"$p\" ] || continue; h=${p%/ports/*}; "
    "s=$(cat \"$p/state\" 2>/dev/null); r=$(cat \"$p/rate\" 2>/dev/null); l=$(cat \"$p/link_layer\" 2>/dev/null); "
    "echo \"ib ${h##*/} ${p##*/} ${s#*: } ${r%% *} ${l:--}\"; done; true"
)

# name -> sh snippet. Order matters only for readability of a raw dump.
BASE_SECTIONS: dict[str, str] = {
    "hostname": "cat /proc/sys/kernel/hostname 2>/dev/null || hostname",
    "uid": "id -u",
    "os-release": "cat /etc/os-release",
    "machine-id": "cat /etc/machine-id",
    "systemd": "test -d /run/systemd/system",
    # -k ignores cached credentials: success means NOPASSWD, not a warm cache.
    "sudo": '[ "$(id -u)" = 0 ] || sudo -k -n true',
    "nvidia-smi": "command -v nvidia-smi",
    "query-gpu": gpu_parsers.QUERY_GPU_SNIPPET,
    "persistenced": "command -v nvidia-persistenced",
    "net": NET_SNIPPET,
    "cpu": cpu_facts.CPU_SNIPPET,  # slurm.conf: CPUs, memory, cgroup layout, each GPU's local CPUs
    "daemons": daemons.DAEMONS_SNIPPET,
    "driver": driver_facts.DRIVER_SNIPPET,  # installed packages, loaded module, nouveau, Secure Boot
    "persistenced-running": (
        f"pid=$(cat {PERSISTENCED_PIDFILE} 2>/dev/null) && [ -n \"$pid\" ] && [ -d \"/proc/$pid\" ]"
        " || systemctl is-active --quiet nvidia-persistenced 2>/dev/null"
    ),
}


# Health, for verify only (apply does not need them): the kernel's NVIDIA and PCIe AER lines of this boot,
# and the AER error counters /sys keeps for each NVIDIA GPU and the port above it (the kernel counts an
# error where it was seen, often at the link partner: Documentation/ABI/testing/sysfs-bus-pci-devices-aer).
# dmesg needs root where kernel.dmesg_restrict=1 (the Debian and Ubuntu default): then sudo -n, then the
# journal of this boot (readable by the adm and systemd-journal groups). The first line says which.
KERNEL_LOG_LINES = 2000  # the newest; a storm of one error says no more in a longer tail
KERNEL_LOG_LINE_PATTERN = r"NVRM|AER|PCIe Bus Error|error status|\[ *[0-9]+\] [A-Z]"  # with an AER report's bits
KERNEL_LOG_SNIPPET = (
    "if out=$(dmesg 2>&1); then src=dmesg; "
    "elif [ \"$(id -u)\" != 0 ] && o=$(sudo -n dmesg 2>/dev/null); then out=$o src='sudo dmesg'; "
    "elif o=$(journalctl -k -b -q --no-pager 2>/dev/null) && [ -n \"$o\" ]; then out=$o src='journalctl -k -b'; "
    "else printf '%s\\n' \"$out\"; exit 1; fi; "
    f"echo \"source: $src\"; printf '%s\\n' \"$out\" | grep -E {shlex.quote(KERNEL_LOG_LINE_PATTERN)} "
    f"| tail -n {KERNEL_LOG_LINES}; true"
)
PCIE_AER_SNIPPET = (
    "for d in /sys/bus/pci/devices/*; do "
    "[ \"$(cat \"$d/vendor\" 2>/dev/null)\" = 0x10de ] || continue; "
    "case $(cat \"$d/class\" 2>/dev/null) in 0x03*) ;; *) continue;; esac; "
    "p=$(dirname \"$(readlink -f \"$d\")\"); echo \"== ${d##*/} ${p##*/} port\"; "
    "for x in \"$d\" \"$p\"; do for f in aer_dev_correctable aer_dev_nonfatal aer_dev_fatal; do "
    "[ -r \"$x/$f\" ] && echo \"== ${d##*/} ${x##*/} $f\" && cat \"$x/$f\"; "
    "done; done; done; true"
)
HEALTH_SECTIONS = {"kernel-log": KERNEL_LOG_SNIPPET, "pcie-aer": PCIE_AER_SNIPPET,
                   "slurm-node": daemons.SLURM_NODE_SNIPPET}
# How far apart the GPUs and RDMA NICs are: `facts` and `verify` read it (apply has no use for it).
TOPOLOGY_SECTIONS = {"topo": "nvidia-smi topo -m"}

# The sections that read the NVIDIA stack; a re-read after a task that changed only files skips them.
NVIDIA_SECTIONS = frozenset({"nvidia-smi", "query-gpu", "supported-clocks", "persistenced", "persistenced-running",
                             "clock-records", "topo"})

UNIT_STATES = {"enabled", "enabled-runtime", "linked", "linked-runtime", "alias", "masked", "masked-runtime",
               "static", "indirect", "disabled", "generated", "transient", "bad"}  # systemctl is-enabled


@dataclass
class Section:
    rc: int
    output: str


def build_script(token: str, file_paths: Sequence[str] = (), units: Sequence[UnitRef] = (),
                 lock: list[str] | None = None, nvidia: bool = True, health: bool = False,
                 topology: bool = False, packages: Sequence[str] = ()) -> str:
    """The whole batch as one sh script. Each section: begin marker, output, end marker + rc.

    With lock (hostlock.take_argv), the first section takes the host lock, so
    a run costs no extra round trip for it. With health, the sections verify reads too.
    """
    sections = {"lock": shlex.join(lock)} if lock else {}
    sections.update(BASE_SECTIONS)
    sections["supported-clocks"] = clock_cache.read_snippet()  # reads "$q", the query-gpu output
    sections["clock-records"] = f"cat {shlex.quote(clock_records_dir())}/GPU-* 2>/dev/null || true"
    sections["gpu-layout"] = f"cat {shlex.quote(layout.record_path())}"  # exit 1: no record yet
    if health:
        sections.update(HEALTH_SECTIONS)
    if topology:
        sections.update(TOPOLOGY_SECTIONS)
    if packages:
        sections["packages"] = daemons.packages_snippet(list(packages))
    for path in file_paths:
        quoted = shlex.quote(path)
        # A file only root may read (a munge key): through sudo -n where the login is not root.
        sections[f"file:{path}"] = (f"stat -c '%a %U %G %.3Y' {quoted} && {{ base64 {quoted} 2>/dev/null || "
                                    f"sudo -n base64 {quoted} 2>/dev/null || echo unreadable; }}")
    for unit in units:
        sections[f"unit:{unit.key}"] = shlex.join(unit.systemctl("is-enabled"))
    if not nvidia:
        sections = {name: snippet for name, snippet in sections.items() if name not in NVIDIA_SECTIONS}
    lines = ["exec 2>&1"]
    for name, snippet in sections.items():
        marker = shlex.quote(f"@@{token} {name}")
        if name == "query-gpu":  # kept in $q for the supported-clocks section: nvidia-smi runs once
            lines.append(f"echo {marker}; q=$( ( {snippet} ) 2>&1 ); rc=$?; printf '%s\\n' \"$q\"; "
                         f"echo; echo {marker} rc=$rc")
        else:
            lines.append(f"echo {marker}; ( {snippet} ); rc=$?; echo; echo {marker} rc=$rc")
    return "\n".join(lines) + "\n"


def split_sections(token: str, output: str) -> dict[str, Section]:
    """Split the batch output back into sections. Tolerates a section that printed no newline."""
    sections: dict[str, Section] = {}
    prefix = f"@@{token} "
    current: str | None = None
    body: list[str] = []
    for line in output.splitlines():
        if not line.startswith(prefix):
            body.append(line)
            continue
        name, _, rc = line[len(prefix):].partition(" rc=")
        if current is None:
            current, body = name, []
        else:
            # The script echoes an extra newline before the end marker.
            if body and body[-1] == "":
                body.pop()
            sections[current] = Section(int(rc or 1), "\n".join(body))
            current = None
    return sections


def new_token() -> str:
    return secrets.token_hex(8)


def parse_facts(sections: dict[str, Section]) -> HostFacts:
    facts = HostFacts(system=_system(sections), nvidia=_nvidia(sections))
    record = sections.get("gpu-layout")
    if record is not None and record.rc == 0:
        facts.gpu_layout = layout.parse_record(record.output)
    if "kernel-log" in sections:
        facts.kernel_log = _kernel_log(sections["kernel-log"])
    if "topo" in sections:
        facts.topology = _topology(sections["topo"])
    if "pcie-aer" in sections:
        facts.pcie = parse_pcie_aer(sections["pcie-aer"].output)
    if "net" in sections:
        facts.interfaces, facts.rdma = parse_network(sections["net"].output)
    if "cpu" in sections:
        facts.cpu = cpu_facts.parse_cpu(sections["cpu"].output)
    if "daemons" in sections:
        facts.daemons = daemons.parse_daemons(sections["daemons"].output)
    if "slurm-node" in sections:
        facts.slurm_node = daemons.parse_slurm_node(sections["slurm-node"].output)
    if "packages" in sections:
        facts.packages = daemons.parse_packages(sections["packages"].output)
        facts.held = daemons.parse_held(sections["packages"].output)
    if "driver" in sections:
        facts.driver = driver_facts.parse_driver(sections["driver"].output)
    for name, section in sections.items():
        if name.startswith("file:"):
            path = name[len("file:"):]
            facts.files[path] = _file(path, section)
        elif name.startswith("unit:"):
            state = section.output.strip().splitlines()[-1:] or [""]
            # is-enabled prints a state word; a missing unit prints an error (and exits non-zero)
            facts.units[name[len("unit:"):]] = state[0] if state[0] in UNIT_STATES else "not-found"
    return facts


def _system(sections: dict[str, Section]) -> SystemFacts:
    def out(name: str) -> str:
        section = sections.get(name)
        return section.output.strip() if section and section.rc == 0 else ""

    os_release = dict(
        line.split("=", 1) for line in out("os-release").splitlines() if "=" in line
    )
    uid = out("uid")
    return SystemFacts(
        hostname=out("hostname"),
        uid=int(uid) if uid.isdigit() else None,
        os_id=os_release.get("ID", "").strip('"'),
        os_version=os_release.get("VERSION_ID", "").strip('"'),
        systemd_running=sections.get("systemd", Section(1, "")).rc == 0,
        sudo_nopasswd=sections.get("sudo", Section(1, "")).rc == 0,
        machine_id=out("machine-id"),
    )


def _nvidia(sections: dict[str, Section]) -> NvidiaFacts:
    persistenced = sections.get("persistenced", Section(1, ""))
    facts = NvidiaFacts(
        persistenced_path=persistenced.output.strip() if persistenced.rc == 0 else None,
        persistenced_running=sections.get("persistenced-running", Section(1, "")).rc == 0,
    )
    if sections.get("nvidia-smi", Section(1, "")).rc != 0:
        facts.state, facts.message = "missing", "nvidia-smi is not installed (no NVIDIA driver)"
        return facts
    query = sections.get("query-gpu", Section(1, ""))
    facts.exit_code = query.rc
    if NVML_MISMATCH in query.output:  # an upgraded driver whose old module is still loaded: a reboot is pending
        facts.state, facts.message = "mismatch", " ".join(query.output.split())
        return facts
    if "No devices were found" in query.output:
        facts.state, facts.message = "no-devices", "No devices were found"
        return facts
    try:
        read = gpu_parsers.read_query_gpu(query.output)
    except gpu_parsers.ParseError as exc:
        facts.state, facts.message = "error", f"cannot parse nvidia-smi output: {exc}"
        return facts
    facts.gpus, facts.driver_version, facts.lost, facts.notes = read.gpus, read.driver_version, read.lost, read.notes
    if not facts.gpus:  # not one GPU readable: driver not loaded, NVML mismatch, every GPU lost
        said = [str(lost) for lost in facts.lost] + facts.notes
        facts.state, facts.message = "error", "; ".join(said) or f"nvidia-smi exited {query.rc}"
        return facts
    if query.rc != 0:  # some GPUs read (15: another fell off the bus): tune those, and say so
        facts.notes.append(f"nvidia-smi --query-gpu exited {query.rc}")
    supported_section = sections.get("supported-clocks", Section(1, ""))
    supported = gpu_parsers.parse_supported_clocks_csv(supported_section.output)
    facts.supported_clocks_source = clock_cache.source_of(supported_section.output)
    records = gpu_parsers.parse_clock_records(sections.get("clock-records", Section(0, "")).output)
    for gpu in facts.gpus:
        gpu.supported_clocks = supported.get(gpu.uuid, [])
        gpu.locked = records.get(gpu.uuid, {})
    facts.state = "ok"
    return facts


def _kernel_log(section: Section) -> KernelLogFacts:
    first, _, rest = section.output.partition("\n")
    if section.rc != 0 or not first.startswith("source: "):
        return KernelLogFacts(message=section.output.strip() or f"exit {section.rc}")
    return KernelLogFacts(source=first.removeprefix("source: "), lines=rest.splitlines())


def _topology(section: Section) -> TopologyFacts:
    if section.rc != 0:
        return TopologyFacts(message=section.output.strip() or f"nvidia-smi topo -m exited {section.rc}")
    try:
        return TopologyFacts(matrix=topo.parse_topo(section.output))
    except topo.TopoParseError as exc:
        return TopologyFacts(message=str(exc))


def parse_pcie_aer(text: str) -> PcieFacts:
    """PCIE_AER_SNIPPET's output: '== GPU PORT port' per GPU, then '== GPU DEVICE FILE' and the file's
    'Name count' lines for each AER file the GPU and its port have."""
    found = PcieFacts()
    current: AerCounters | None = None
    for line in text.splitlines():
        words = line.split()
        if len(words) == 4 and words[0] == "==" and words[3] == "port":
            found.ports[words[1]] = words[2]
        elif len(words) == 4 and words[0] == "==":
            current = AerCounters(gpu=words[1], device=words[2], kind=words[3].removeprefix("aer_dev_"))
            found.aer.append(current)
        elif current and len(words) >= 2 and words[-1].isdigit():
            name = " ".join(words[:-1])
            if name.startswith("TOTAL_ERR_"):
                current.total = int(words[-1])
            else:
                current.counts[name] = int(words[-1])
    return found


def parse_network(text: str) -> tuple[list[Interface], list[RdmaPort]]:
    """NET_SNIPPET's output: an 'ip JSON' line (absent where ip lacks -j), 'sys NAME OPERSTATE SPEED DEVICE'
    per interface, 'ib HCA PORT STATE RATE LINK_LAYER' per RDMA port. Interfaces in ifindex order where ip
    tells it (the order NCCL lists them in: getifaddrs'), else by name."""
    from_ip: dict[str, dict] = {}
    sys_lines, ports = [], []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "ip":
            try:
                from_ip = {link["ifname"]: link for link in json.loads(rest) if "ifname" in link}
            except (ValueError, TypeError):
                from_ip = {}  # a broken `ip -j`: the /sys lines still say enough
        elif kind == "sys" and len(rest.split()) == 4:
            sys_lines.append(rest.split())
        elif kind == "ib" and len(rest.split()) == 5:
            hca, port, state, rate, layer = rest.split()
            ports.append(RdmaPort(hca, int(port) if port.isdigit() else 0, state, _number(rate),
                                  "" if layer == "-" else layer))
    interfaces = []
    for name, operstate, speed, device in sys_lines:
        link = from_ip.get(name)
        mbps = _number(speed)
        interfaces.append(Interface(
            name, operstate.lower(), int(mbps) if mbps and mbps > 0 else None,
            flags=tuple(link.get("flags", ())) if link else None,
            addresses=tuple(f"{a['local']}/{a.get('prefixlen', '')}" for a in link.get("addr_info", ())
                            if "local" in a) if link else None,
            device=device if device.startswith("/sys/devices/pci") else None))
    order = {name: link.get("ifindex", 0) for name, link in from_ip.items()}
    return sorted(interfaces, key=lambda i: order.get(i.name, 1 << 30)), ports


def _number(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None


def _file(path: str, section: Section) -> FileFacts:
    if section.rc != 0:
        return FileFacts(path=path, exists=False)
    first, _, encoded = section.output.partition("\n")
    mode, owner, group, mtime = (first.split() + ["", "", "", ""])[:4]
    try:
        content = base64.b64decode("".join(encoded.split()), validate=True)
    except ValueError:  # not readable by us (stat worked, reading did not): the file is there, its content unknown
        content = None
    return FileFacts(path=path, exists=True, content=content, mode=mode, owner=owner, group=group,
                     mtime=_number(mtime))

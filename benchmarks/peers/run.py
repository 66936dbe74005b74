"""The peers of `provision apply` in benchmarks/apply_scale.py: Ansible and pyinfra on the same lab nodes.

Each tool does the same work (WORK below), written as a careful user of that tool would
(benchmarks/peers/ansible/site.yaml, benchmarks/peers/pyinfra/deploy.py; provision itself: the shipped
site playbook, whose nccl-files task writes /etc/nccl.conf and its env file). This module writes each
tool's inventory for a lab, runs the tool in a fresh process (timed: interpreter start counts), checks
what it reported (Ansible's PLAY RECAP, pyinfra's --json results), reads the nodes back over SSH to
check that they really are converged, and resets them between tools.

The peers live in their own venv (not project dependencies): `sh benchmarks/peers/setup.sh`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_VENV = Path("/var/cache/provision-bench/venv")

# The work every tool does on every node (a lab node: 4x V100 SXM2, whose defaults are persistence
# off, 300 W, application clocks 877,1312).
WORK = {"persistence": True, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005},
        "nccl": {"socket_ifname": "ens803f", "socket_nthreads": 1}}
UNIT = "provision-gpu-tuning.service"
SCRIPT = "/usr/local/sbin/provision-gpu-tuning"
FILES = ("/etc/nccl.conf", "/etc/provision/gpu-tuning.conf", f"/etc/systemd/system/{UNIT}")
WANTS_LINK = f"/etc/systemd/system/multi-user.target.wants/{UNIT}"
SMI_FIELDS = ("index,uuid,persistence_mode,power.limit,clocks.applications.memory,clocks.applications.graphics")
SMI_QUERY = f"nvidia-smi --query-gpu={SMI_FIELDS} --format=csv,noheader,nounits"
# Issue 28's floor, the least a no-op of this work reads: the query, a hash of two of the files, the unit's state.
ISSUE_FLOOR = f"{SMI_QUERY}; sha1sum {FILES[0]} {FILES[1]}; systemctl is-enabled {UNIT}"

# What each tool leaves on a node, removed before each first converge (with the backups provision keeps,
# FILE.<time>~, and its records: the supported-clocks cache and the GPU layout, which a new node has not, so that
# each of its first converges reads the clocks from nvidia-smi and records the layout again). A reboot then resets
# the GPUs; with the unit gone, nothing re-applies them.
RESET = (f"rm -rf /etc/provision /var/cache/provision /var/lib/provision && "
         f"rm -f /etc/nccl.conf /etc/nccl.conf.*~ {SCRIPT} {SCRIPT}.*~ "
         f"/etc/systemd/system/{UNIT} /etc/systemd/system/{UNIT}.*~ {WANTS_LINK}")

# Run on a node (its python3, stdin): what the checks below need, as JSON.
PROBE = f"""
import hashlib, json, os, subprocess
def read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None
smi = subprocess.run({SMI_QUERY.split()!r}, capture_output=True, text=True)
unit = subprocess.run(["systemctl", "is-enabled", {UNIT!r}], capture_output=True, text=True)
script = read({SCRIPT!r})
print(json.dumps({{
    "gpus": [[f.strip() for f in line.split(",")] for line in smi.stdout.splitlines()], "smi_rc": smi.returncode,
    "files": {{path: read(path) for path in {FILES!r}}},
    "script": script and hashlib.sha256(script.encode()).hexdigest(),
    "script_mode": os.path.exists({SCRIPT!r}) and oct(os.stat({SCRIPT!r}).st_mode & 0o777),
    "unit": unit.stdout.strip() or "not-found",
}}))
"""


class PeerError(SystemExit):
    pass


# --- inventories ---------------------------------------------------------------------------------

def write_inventories(lab, nodes: list[dict], workdir: Path) -> dict[str, Path]:
    """provision's (the lab's inventory + WORK's clocks and NCCL), Ansible's and pyinfra's, in workdir."""
    paths = {"provision": workdir / "provision.yaml", "ansible": workdir / "ansible.yaml",
             "pyinfra": workdir / "pyinfra_inventory.py"}
    paths["provision"].write_text(yaml.safe_dump(provision_inventory(lab), sort_keys=False))
    paths["ansible"].write_text(yaml.safe_dump(ansible_inventory(lab, nodes), sort_keys=False))
    paths["pyinfra"].write_text(pyinfra_inventory(lab, nodes))
    return paths


def provision_inventory(lab) -> dict:
    tree = yaml.safe_load(lab.inventory_path.read_text())
    group = tree["all"]["children"]["nodes"]
    group["vars"]["provision_gpu"].update(persistence=WORK["persistence"], power_limit=WORK["power_limit"],
                                clocks=dict(WORK["clocks"]))
    group["vars"]["provision_nccl"] = dict(WORK["nccl"])
    for host in group["hosts"].values():
        if "ssh_config" in host:  # relative to the lab's own inventory: not where this copy lives
            host["ssh_config"] = str(lab.ssh_config_path)
    return tree


def ansible_inventory(lab, nodes: list[dict]) -> dict:
    variables = {
        "ansible_user": "root",
        "ansible_ssh_common_args": f"-F {lab.ssh_config_path}",  # key, known_hosts, StrictHostKeyChecking yes
        "gpu_persistence": WORK["persistence"], "gpu_power_limit": WORK["power_limit"],
        "gpu_clocks": dict(WORK["clocks"]),
        **{f"nccl_{key}": value for key, value in WORK["nccl"].items()},
    }
    hosts = {n["name"]: {"ansible_host": n["address"]} for n in nodes}
    return {"all": {"children": {"nodes": {"hosts": hosts, "vars": variables}}}}


def pyinfra_inventory(lab, nodes: list[dict]) -> str:
    ssh = {"ssh_user": "root", "ssh_key": str(lab.dir / "id_ed25519"),
           "ssh_known_hosts_file": str(lab.dir / "known_hosts"), "ssh_strict_host_key_checking": "yes",
           "ssh_allow_agent": False, "ssh_look_for_keys": False}
    data = {"gpu_persistence": WORK["persistence"], "gpu_power_limit": WORK["power_limit"],
            "gpu_clocks": dict(WORK["clocks"]), **{f"nccl_{key}": value for key, value in WORK["nccl"].items()}}
    hosts = [(n["name"], {"ssh_hostname": n["address"], **ssh}) for n in nodes]
    return f"# Written by benchmarks/peers/run.py for {lab.dir}.\nnodes = ({hosts!r}, {data!r})\n"


# --- running the peers ---------------------------------------------------------------------------

def add_arguments(parser, peers_help: str) -> None:
    """The options every benchmark that runs the peers on the lab takes: its lab directory, --peers and the venv."""
    parser.add_argument("--dir", default="/var/lib/provision-lab/bench", help="the benchmark lab's directory")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True, help=peers_help)
    parser.add_argument("--peers-venv", type=Path, default=DEFAULT_VENV,
                        help="the peers' venv (benchmarks/peers/setup.sh makes it)")


def check_venv(venv: Path) -> dict[str, str]:
    """The peers' versions; PeerError when the venv is not set up."""
    tools = {"ansible": venv / "bin" / "ansible-playbook", "pyinfra": venv / "bin" / "pyinfra"}
    missing = [str(path) for path in tools.values() if not os.access(path, os.X_OK)]
    if missing:
        raise PeerError(f"peers venv incomplete ({', '.join(missing)} missing): run `sh {HERE / 'setup.sh'}` "
                        f"(VENV={venv}), or pass --no-peers")
    versions = {"python": _run([str(venv / "bin" / "python"), "--version"]).split()[-1],
                "ansible-core": re.search(r"core ([\w.]+)", _run([str(tools["ansible"]), "--version"])).group(1),
                "pyinfra": _run([str(tools["pyinfra"]), "--version"]).split()[-1].lstrip("v")}
    return versions


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def timed(argv: list[str], **kwargs) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, control CPU seconds, the process): the CPU is the command's and every process it waited
    for (the ssh clients Ansible starts), user + system: what the control machine spends on the run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, **kwargs)
    wall, after = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc


def ansible(venv: Path, inventory: Path, nodes: list[dict], workdir: Path, first: bool) -> tuple[float, float]:
    """One ansible-playbook run, timed; PeerError unless every host reports ok, and changes on the first run
    only. SSH connections are shared within the run (ControlPersist, Ansible's default) but not across runs:
    each run gets a fresh control directory, and its masters are closed after the timing."""
    control = Path(tempfile.mkdtemp(prefix="cp-", dir=workdir))
    env = {**os.environ, "ANSIBLE_CONFIG": str(HERE / "ansible" / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control), "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp")}
    try:
        seconds, cpu, proc = timed([str(venv / "bin" / "ansible-playbook"), "-i", str(inventory), "-f", str(len(nodes)),
                                    "site.yaml"], cwd=HERE / "ansible", env=env)
    finally:
        for socket in control.iterdir():
            subprocess.run(["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "peer"], capture_output=True)
        shutil.rmtree(control, ignore_errors=True)
    recap = dict(re.findall(r"^(\S+)\s+:\s+(ok=.*)$", proc.stdout, re.M))
    counts = {host: dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line)) for host, line in recap.items()}
    _expect("ansible", proc, counts, lambda c: c["unreachable"] == 0 and c["failed"] == 0,
            lambda c: c["changed"] > 0 if first else c["changed"] == 0, first, nodes)
    return seconds, cpu


def pyinfra(venv: Path, inventory: Path, nodes: list[dict], workdir: Path, first: bool) -> tuple[float, float]:
    """One pyinfra run (--json results on stdout), timed; PeerError unless every host succeeded, with changes on
    the first run only (an operation that changed nothing is "no_change"; one that did, "success")."""
    seconds, cpu, proc = timed([str(venv / "bin" / "pyinfra"), str(inventory), str(HERE / "pyinfra" / "deploy.py"),
                                "-y", "--parallel", str(len(nodes)), "--json"], cwd=workdir)
    try:
        results = json.loads(proc.stdout)["results"]
    except (ValueError, KeyError):
        raise PeerError(f"pyinfra exited {proc.returncode} without its JSON results:\n{proc.stderr[-3000:]}")
    hosts = {h for op in results["operations"] for h in op["success"] + op["error"] + op["no_change"]}
    counts = {h: {"changed": sum(h in op["success"] for op in results["operations"]),
                  "error": sum(h in op["error"] for op in results["operations"]),
                  "failed": h in results["failed_hosts"]} for h in hosts}
    _expect("pyinfra", proc, counts, lambda c: not c["error"] and not c["failed"],
            lambda c: c["changed"] > 0 if first else c["changed"] == 0, first, nodes)
    return seconds, cpu


def _expect(tool, proc, counts: dict[str, dict], ok, changes, first: bool, nodes: list[dict]) -> None:
    names = {n["name"] for n in nodes}
    wrong = {h: c for h, c in counts.items() if not (ok(c) and changes(c))}
    if proc.returncode != 0 or set(counts) != names or wrong:
        kind = "first converge" if first else "no-op"
        raise PeerError(f"{tool} {kind}: exit {proc.returncode}, hosts {sorted(counts)} of {sorted(names)}, "
                        f"unexpected {wrong}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")


# --- the nodes: read back, reset ----------------------------------------------------------------

def ssh(lab, address: str, command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """OpenSSH with the lab's ssh_config (its key, its known_hosts, StrictHostKeyChecking yes)."""
    return subprocess.run(["ssh", "-F", str(lab.ssh_config_path), "-o", "BatchMode=yes", address, command],
                          input=stdin, capture_output=True, text=True, timeout=120)


def probe(lab, nodes: list[dict]) -> dict[str, dict]:
    def one(node):
        proc = ssh(lab, node["address"], "python3 -", PROBE)
        if proc.returncode != 0:
            raise PeerError(f"reading {node['name']} back failed: {proc.stderr[-1000:]}")
        return node["name"], json.loads(proc.stdout)
    with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
        return dict(pool.map(one, nodes))


def gpu_problems(state: dict) -> list[str]:
    """What differs from WORK on the GPUs (an empty list: all at the target)."""
    if state["smi_rc"] != 0 or not state["gpus"]:
        return [f"nvidia-smi exited {state['smi_rc']} with {len(state['gpus'])} GPU(s)"]
    clocks = f"{WORK['clocks']['mem']},{WORK['clocks']['sm']}"
    problems = []
    for index, _uuid, persistence, power, mem, sm in state["gpus"]:
        if persistence != ("Enabled" if WORK["persistence"] else "Disabled"):
            problems.append(f"GPU{index} persistence {persistence}")
        if float(power) != WORK["power_limit"]:
            problems.append(f"GPU{index} power limit {power} W")
        if f"{mem},{sm}" != clocks:
            problems.append(f"GPU{index} application clocks {mem},{sm}")
    return problems


def file_problems(state: dict) -> list[str]:
    """What differs from WORK in the files and the unit (an empty list: all there)."""
    files, problems = state["files"], []
    nccl = files["/etc/nccl.conf"] or ""
    for key, value in WORK["nccl"].items():
        if f"NCCL_{key.upper()}={value}\n" not in nccl:
            problems.append(f"/etc/nccl.conf lacks NCCL_{key.upper()}={value}")
    conf = files["/etc/provision/gpu-tuning.conf"] or ""
    for _index, uuid, *_ in state["gpus"]:
        if not re.search(rf"^gpu={uuid} .*power_limit={WORK['power_limit']} clocks=", conf, re.M):
            problems.append(f"/etc/provision/gpu-tuning.conf has no line for {uuid}")
    if f"ExecStart={SCRIPT} " not in (files[f"/etc/systemd/system/{UNIT}"] or ""):
        problems.append(f"/etc/systemd/system/{UNIT} missing or without ExecStart={SCRIPT}")
    shipped = subprocess.run(["sha256sum", str(REPO / "templates" / "provision-gpu-tuning.sh")],
                             capture_output=True, text=True).stdout.split()[0]
    if state["script"] != shipped or state["script_mode"] != "0o755":
        problems.append(f"{SCRIPT} is not the shipped script, mode 0755")
    if state["unit"] != "enabled":
        problems.append(f"{UNIT} is {state['unit']}")
    return problems


def expect_converged(lab, nodes: list[dict], tool: str) -> None:
    bad = {name: gpu_problems(s) + file_problems(s) for name, s in probe(lab, nodes).items()}
    bad = {name: problems for name, problems in bad.items() if problems}
    if bad:
        raise PeerError(f"after {tool}'s first converge, not converged: {bad}")


def expect_unconverged(lab, nodes: list[dict]) -> None:
    """Every GPU setting and every file differs from WORK: a first converge has everything to do."""
    for name, state in probe(lab, nodes).items():
        wanted = 3 * len(state["gpus"])
        gpus = gpu_problems(state)
        if len(gpus) != wanted or any(state["files"].values()) or state["script"] or state["unit"] == "enabled":
            raise PeerError(f"{name} is not back to unconverged after the reset: GPUs {gpus}, files {state['files']}, "
                            f"script {state['script']}, unit {state['unit']}")


def reset(lab, nodes: list[dict]) -> float:
    """Remove every file and link the tools write, then power-cycle every node (GPU settings are lost at a
    reboot, and with the boot unit gone nothing re-applies them); check the result. Seconds it took."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
        failed = [n["name"] for n, p in zip(nodes, pool.map(lambda n: ssh(lab, n["address"], RESET), nodes))
                  if p.returncode != 0]
    if failed:
        raise PeerError(f"reset failed on {', '.join(failed)}")
    for node in nodes:
        lab.reboot(node["name"], log=lambda message: None)  # the lab reboots one node at a time
    expect_unconverged(lab, nodes)
    return time.monotonic() - started


def expect_boot_reapplies(lab, node: dict, tool: str) -> None:
    """Power-cycle one node: the boot unit the tool enabled must bring every GPU back to the target."""
    lab.reboot(node["name"], log=lambda message: None)
    problems = gpu_problems(probe(lab, [node])[node["name"]])
    if problems:
        raise PeerError(f"{tool}: after a reboot of {node['name']}, its boot unit did not re-apply: {problems}")


if __name__ == "__main__":
    print(json.dumps(check_venv(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_VENV)))

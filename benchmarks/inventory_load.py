"""How long provision takes to read a 10,000-host inventory, beside `ansible-inventory --list` on the same files.

The inventory is generated (into a temporary directory, or --dir) as a site keeps a large GPU cluster: an INI
file `hosts` of racks of 40 hosts (`[rack-001]` ...; even racks written as one range line,
`gpu-r002-[01:40]`, the names being the addresses; odd racks one line per host with its `ansible_host`),
`[gpu:children]` of the racks, a `[login]` group, `[slurm-cluster:children]` of both and `[GROUP:vars]`
sections; beside it group_vars/all.yml (~150 other roles' variables, as a DeepOps all.yml holds, and
provision's gpu and nccl blocks), group_vars/gpu.yml, slurm-cluster.yml, a rack-NNN.yml for every fifth
rack, and host_vars/ for 1% of the hosts.

Measured, each the median of --repeat runs:

- load_inventory(PATH) in this process (the library call every command makes), and its peak of Python
  allocations (tracemalloc, in one more run);
- fresh processes, as a user feels them (interpreter start and imports count): the imports alone, a
  `python -c` that loads the inventory, and `provision inventory --list` where this checkout has it;
- `ansible-inventory -i PATH --list` (ansible-core from this venv; --ansible-repeat runs, it is slow).

Fresh processes run from an empty directory with an empty HOME (no ansible.cfg is read), their output
thrown away; their peak memory is the process's maximum RSS (wait4). Before timing, both tools must agree
on the number of hosts and on a few hosts' effective ansible_host and ansible_user.

    .venv/bin/python benchmarks/inventory_load.py [--hosts 10000] [--repeat 5] [--ansible-repeat 3] [--dir DIR]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml

from provision.inventory.load import load_inventory

RACK = 40  # hosts per rack
LOGINS = 4  # login01..login04
IMPORTS = "from provision.inventory.load import load_inventory"
LOAD = f"import sys; {IMPORTS}; load_inventory(sys.argv[1])"
ANSIBLE_INVENTORY = shutil.which("ansible-inventory", path=str(Path(sys.executable).parent))

# Other roles' variables, as a DeepOps group_vars/all.yml has them: provision leaves them alone, but reads past
# them at every level. 30 roles x 5 settings.
ROLES = ("slurm", "docker", "nvidia_docker", "enroot", "pyxis", "singularity", "nfs", "ntp", "chrony", "lmod",
         "spack", "easybuild", "openmpi", "ofed", "dcgm_exporter", "prometheus", "grafana", "alertmanager",
         "node_exporter", "rsyslog", "filebeat", "nhc", "hpcsdk", "cuda_toolkit", "kube", "helm", "nginx",
         "sssd", "ldap_client", "firewalld")
ROLE_SETTINGS = {"version": "1.2.3", "enabled": True, "install_prefix": "/usr/local", "extra_args": ["--x", "-y"],
                 "options": {"log_level": "info", "retries": 3, "paths": ["/etc", "/opt"]}}


def other_roles_vars() -> dict:
    return {f"{role}_{key}": value for role in ROLES for key, value in ROLE_SETTINGS.items()}


def write_inventory(root: Path, hosts: int) -> Path:
    """The inventory of `hosts` hosts under root (root/hosts, root/group_vars, root/host_vars); its path."""
    compute = hosts - LOGINS
    racks = [list(range(1, min(RACK, compute - start) + 1)) for start in range(0, compute, RACK)]
    lines = ["[login]", f"login[01:{LOGINS:02d}]", "", "[login:vars]", "ansible_user=admin", "nfs_is_server=True", ""]
    host_vars = []
    for r, slots in enumerate(racks, 1):
        rack = f"rack-{r:03d}"
        lines.append(f"[{rack}]")
        if r % 2 == 0:
            lines.append(f"gpu-r{r:03d}-[01:{len(slots):02d}]")
        else:
            lines += [f"gpu-r{r:03d}-{s:02d} ansible_host=10.{r // 250}.{r % 250}.{s}" for s in slots]
        lines += ["", f"[{rack}:vars]", f"rack_id={r}", f"pdu=pdu-{r:03d}", f"row='{chr(65 + r % 20)}'", ""]
        host_vars += [f"gpu-r{r:03d}-{s:02d}" for s in slots if (r * RACK + s) % 100 == 0]
    lines += ["[gpu:children]", *(f"rack-{r:03d}" for r in range(1, len(racks) + 1)), "",
              "[gpu:vars]", "ansible_user=ubuntu", "ansible_become=True", "gpu_type=a100", "",
              "[slurm-cluster:children]", "gpu", "login", "",
              "[slurm-cluster:vars]", "slurm_partition_default=gpu", ""]
    (root / "hosts").write_text("\n".join(lines))

    def vars_file(directory: str, name: str, data: dict) -> None:
        (root / directory).mkdir(exist_ok=True)
        (root / directory / f"{name}.yml").write_text(yaml.safe_dump(data, sort_keys=False))

    vars_file("group_vars", "all", {**other_roles_vars(), "ntp_servers": ["0.pool.ntp.org", "1.pool.ntp.org"],
                                    "provision_gpu": {"persistence": True, "power_limit": 250},
                                    "provision_nccl": {"socket_ifname": "=ib0,ib1", "ib_hca": "=mlx5_0:1,mlx5_1:1"}})
    vars_file("group_vars", "gpu", {"provision_gpu": {"count": 8, "clocks": {"mem": 1215, "sm": 1410}},
                                    "provision_launcher": {"nproc_per_node": "gpu", "rdzv_port": 29400},
                                    "provision_nccl": {"expected_link_speed_mbps": 200000}, "docker_storage": "/raid"})
    vars_file("group_vars", "slurm-cluster", {"provision_slurm": {"controller": "login01", "cluster_name": "bench",
                                                        "partition": "batch"}})
    for r in range(5, len(racks) + 1, 5):  # a weak PDU every fifth rack
        vars_file("group_vars", f"rack-{r:03d}", {"provision_gpu": {"power_limit": 220}, "rack_notes": "PDU B derated"})
    vars_file("host_vars", "login01", {"provision_slurm": {"role": "controller"}})
    for name in host_vars:  # a GPU under RMA watch, reached as another user
        vars_file("host_vars", name, {"ansible_user": "maint", "provision_gpu": {"overrides": [{"index": 3, "power_limit": 200}]}})
    return root / "hosts"


def in_process(path: Path, repeat: int) -> tuple[list[float], int]:
    """Seconds of each load_inventory(path), and the peak of Python allocations of one more (tracemalloc)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        load_inventory(path)
        times.append(time.perf_counter() - started)
    tracemalloc.start()
    load_inventory(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return times, peak


# Starts the measured command and waits for it: a process started by this one (vfork) would carry this one's
# memory as its max RSS, hence a small interpreter in between. Prints seconds, exit code and max RSS in KiB.
SPAWN = """import os, sys, time
started = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull,
                                                                          os.O_WRONLY, 0)])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - started, os.waitstatus_to_exitcode(status), usage.ru_maxrss)"""


def fresh(command: list[str], repeat: int, home: Path) -> tuple[list[float], int]:
    """Wall seconds of each run of `command` as a new process (output thrown away), and the largest max RSS."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C.UTF-8",
           "ANSIBLE_LOCAL_TEMP": str(home / "tmp")}
    times, rss = [], 0
    with tempfile.TemporaryDirectory() as cwd:  # ansible-inventory would read group_vars/ of its cwd
        for _ in range(repeat):
            proc = subprocess.run([sys.executable, "-S", "-c", SPAWN, *command], cwd=cwd, env=env,
                                  capture_output=True, text=True, check=True)
            seconds, code, kib = proc.stdout.split()
            if code != "0":
                raise SystemExit(f"{' '.join(command)} exited {code}: {proc.stderr[-2000:]}")
            times.append(float(seconds))
            rss = max(rss, int(kib) * 1024)
    return times, rss


def agree(path: Path, home: Path) -> str:
    """Both tools read the same hosts, with the same effective ansible_host and ansible_user for a few."""
    inventory = load_inventory(path)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANSIBLE_LOCAL_TEMP": str(home / "tmp"), "LC_ALL": "C.UTF-8"}
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([ANSIBLE_INVENTORY, "-i", str(path), "--list"], capture_output=True, text=True,
                             env=env, cwd=cwd, check=True).stdout
    hostvars = json.loads(out)["_meta"]["hostvars"]
    with_host_vars = [n for n in inventory.hosts if n.startswith("gpu-") and (path.parent / "host_vars" / f"{n}.yml").exists()]
    picked = ["login01", "gpu-r001-01", "gpu-r002-01", *with_host_vars[:2], list(inventory.hosts)[-1]]
    lines = [f"hosts: provision {len(inventory.hosts)}, ansible-inventory {len(hostvars)}"]
    ok = len(inventory.hosts) == len(hostvars)
    for name in picked:
        ours = (inventory.hosts[name].address, inventory.hosts[name].user)
        theirs = (hostvars[name].get("ansible_host", name), hostvars[name].get("ansible_user"))
        ok &= ours == theirs
        lines.append(f"  {name}: provision {ours}, ansible-inventory {theirs}")
    if not ok:
        raise SystemExit("the tools disagree:\n" + "\n".join(lines))
    return "\n".join(lines)


def row(what: str, times: list[float], peak: int, ansible: float | None = None) -> str:
    """A table row; `ansible`: ansible-inventory's median, to say how many times faster this is."""
    median = statistics.median(times)
    return (f"| {what} | {median:.2f} | {min(times):.2f}-{max(times):.2f} | {len(times)} | {peak / 2**20:.0f} | "
            + (f"{ansible / median:.1f}x |" if ansible else "- |"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10000, help="hosts in the inventory (4 of them login nodes)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each provision measurement (median)")
    parser.add_argument("--ansible-repeat", type=int, default=3, help="runs of ansible-inventory (median)")
    parser.add_argument("--dir", type=Path, help="write the inventory here and keep it (default: a temporary one)")
    args = parser.parse_args()
    if args.hosts <= LOGINS:
        parser.error(f"--hosts must be above {LOGINS}")
    if ANSIBLE_INVENTORY is None:
        raise SystemExit("ansible-inventory is not in this venv: pip install -e '.[test]'")
    with tempfile.TemporaryDirectory(prefix="provision-bench-") as tmp:
        root = args.dir or Path(tmp) / "inventory"
        root.mkdir(parents=True, exist_ok=True)
        home = Path(tmp) / "home"
        (home / "tmp").mkdir(parents=True)
        path = write_inventory(root, args.hosts)
        print(agree(path, home), file=sys.stderr, flush=True)

        imports = fresh([sys.executable, "-c", IMPORTS], args.repeat, home)
        loads = [("`load_inventory()` in process", in_process(path, args.repeat)),
                 ("fresh process: `python -c` load_inventory", fresh([sys.executable, "-c", LOAD, str(path)],
                                                                      args.repeat, home))]
        if importlib.util.find_spec("provision.commands.inventory"):
            loads.append(("`provision inventory --list`", fresh([sys.executable, "-m", "provision", "inventory",
                                                                str(path), "--list"], args.repeat, home)))
        ansible = fresh([ANSIBLE_INVENTORY, "-i", str(path), "--list"], args.ansible_repeat, home)

    print(f"\n{args.hosts} hosts ({len(range(0, args.hosts - LOGINS, RACK))} racks); Python "
          f"{sys.version.split()[0]}; {os.cpu_count()} CPUs\n")
    print("| what | median s | min-max s | runs | peak MiB | ansible-inventory / this |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(row("fresh process: the imports only", *imports))
    for what, (times, peak) in loads:
        print(row(what, times, peak, statistics.median(ansible[0])))
    print(row("`ansible-inventory --list`", *ansible))
    print("\npeak MiB: in process, Python's allocations during one load (tracemalloc); fresh processes, max RSS.")


if __name__ == "__main__":
    main()

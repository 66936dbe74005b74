"""One lab node: its disk (an overlay over the shared image), its identity, its processes.

A node runs as: its supervisor (supervise: this machine's PID and mount
namespaces, the node's network namespace) -> into its own cgroup in each of
this machine's cgroup v1 hierarchies -> `ip netns exec NS unshare --cgroup
--uts --pid --mount --fork` -> setup (hostname; the node's own /proc,
/proc/driver, /sys, /dev, /run) -> chroot -> nodeinit.py as PID 1 of the node.
Killing every process of the network namespace is a power cut: the supervisor
and PID 1 go, the kernel takes the rest of the node with it, the mounts made
inside vanish with its mount namespace, and its cgroups are removed (a machine
boots with none of its own).

A node reboots itself as a machine does, with reboot(2) (its /usr/sbin/reboot):
in a PID namespace the kernel then ends the namespace's PID 1 as if by SIGHUP,
and only that; the supervisor sees it and boots the node again, with fresh
cgroups and a fresh /run, as `provision lab reboot` would.

The node's cgroups: see cgroups.py. Its supervisor: supervisor.py.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from provision_lab import bmc, netns, nodeinit, rdma, simzip
from provision_lab.cgroups import JOIN, make_cgroups, remove_cgroups
from provision_lab.layout import (APT_REPO_IN_NODE, DMESG, NETNS_DIR, NODE_INIT, NODE_MODULES, NODE_NVML_LIBRARY,
                                  NODE_RDMA,
                                  NODE_REBOOT, NODE_SIM, NODE_SIM_CONFIG, NODE_SIM_ZIPAPP, NODEINIT_SOURCE,
                                  NVIDIA_PERSISTENCED, NVIDIA_SMI, SIM_PACKAGE, SOURCE_ROOT)
from provision_lab.model import NodeSpec
from provision_lab.system import LabError, run

# Inside the new namespaces, before the chroot: the node's own kernel views,
# never the host's /dev (a node that creates /dev/nvidia0 must not create it here) nor its /proc/driver
# (masked by a tmpfs, as Docker masks /proc/acpi: the node's simulated driver writes nvidia/version there).
SETUP = r'''set -eu
root=$1 name=$2
hostname "$name"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0555,size=1m,nosuid,nodev,noexec driver "$root/proc/driver"  # the node's own driver files (nvidia-caps/mig-minors: 107 KiB)
mount -t sysfs sysfs "$root/sys"
if [ -d "$root''' + NODE_RDMA + r'''" ]; then  # the node's RDMA ports (rdma.py), in its mount namespace only:
  mount -t tmpfs -o mode=0755,size=64k,nosuid,nodev,noexec class "$root/sys/class"  # over its /sys/class,
  set -- $(cd /sys/class && echo *)  # with each entry of its sysfs (this netns's: /sys/class/net) bound back
  (cd "$root/sys/class" && mkdir -p "$@" infiniband)
  for c; do [ "$c" = infiniband ] || mount --bind "/sys/class/$c" "$root/sys/class/$c"; done
  mount -o remount,ro "$root/sys/class"
  mount -t tmpfs -o mode=0755,size=1m,nosuid,nodev,noexec infiniband "$root/sys/class/infiniband"
  cp -a "$root''' + NODE_RDMA + r'''/." "$root/sys/class/infiniband/"
fi
if [ -d "$root''' + NODE_MODULES + r'''" ]; then  # the node's loaded modules (rdma.py): its own /sys/module
  mount -t tmpfs -o mode=0755,size=64k,nosuid,nodev,noexec module "$root/sys/module"
  cp -a "$root''' + NODE_MODULES + r'''/." "$root/sys/module/"
fi
mount -t tmpfs -o mode=0755,size=1m,nosuid dev "$root/dev"
mknod -m 0666 "$root/dev/null" c 1 3
mknod -m 0666 "$root/dev/zero" c 1 5
mknod -m 0666 "$root/dev/full" c 1 7
mknod -m 0666 "$root/dev/random" c 1 8
mknod -m 0666 "$root/dev/urandom" c 1 9
mknod -m 0666 "$root/dev/tty" c 5 0
mkdir -m 0755 "$root/dev/pts"
mkdir -m 1777 "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mount -t tmpfs -o mode=0755,nosuid,nodev run "$root/run"
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    /usr/bin/python3 -I ''' + NODE_INIT + ''' "$name"
'''


class Node:
    def __init__(self, spec: NodeSpec, net: netns.LabNet, lab_dir: Path):
        self.spec = spec
        self.net = net
        self.dir = lab_dir / "nodes" / spec.name
        self.root = self.dir / "root"
        self.ns = net.netns(spec.name)
        self.address = net.mgmt_address(spec.index)

    # --- disk and identity ---------------------------------------------------------------------

    def create(self, image: Path, apt_repo: Path, client_public_key: str, layers: tuple[Path, ...] = (),
               hosts: tuple[tuple[str, str], ...] = ()) -> None:
        """The node's disk: its own upper over layers (topmost first: the provision layer, the torch layer)
        over the image.
        hosts: (address, name) of every node of the lab, for /etc/hosts (the lab has no DNS: the resolver reads
        that file alone, see nsswitch_file)."""
        for sub in ("upper", "work", "root"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        lower = ":".join(str(p) for p in [*layers, image])
        run(["mount", "-t", "overlay", f"plab-{self.spec.name}", "-o",
             f"lowerdir={lower},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}", str(self.root)])
        self.serve_apt_repo(apt_repo)
        self.write("etc/hostname", f"{self.spec.name}\n")
        self.write("etc/machine-id", secrets.token_hex(16) + "\n", mode=0o444)  # its own, as every machine's
        self.write("etc/hosts", hosts_file(self.spec.name, hosts))
        image_nsswitch = self.root / "etc" / "nsswitch.conf"
        self.write("etc/nsswitch.conf", nsswitch_file(image_nsswitch.read_text() if image_nsswitch.exists() else ""))
        self.write("root/.ssh/authorized_keys", client_public_key, mode=0o600)
        (self.root / "root" / ".ssh").chmod(0o700)
        key = self.root / "etc" / "ssh" / "ssh_host_ed25519_key"
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{self.spec.name}", "-f", str(key)])
        self.install_gpus()
        bmc.install(self)  # its BMC: ipmi_sim, and how provision reaches it (bmc.py)
        for path, text in rdma.power_on_tree(self.spec.rdma).items():  # SETUP mounts it at /sys/class/infiniband
            self.write(f"{NODE_RDMA}/{path}", text, mode=0o444)
        if self.spec.rdma:  # SETUP mounts a writable /sys/module over it: nothing loaded at power-on
            (self.root / NODE_MODULES.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for path, (mode, text) in rdma.modprobe_files(self.spec.rdma).items():  # `modprobe nvidia-peermem` loads it
            self.write(path, text, mode=mode)
        if self.spec.modules_load:  # what its admin has systemd-modules-load load at boot (nodeinit.load_modules)
            modules = self.root / "etc" / "modules"
            self.write("etc/modules", (modules.read_text() if modules.exists() else "")
                       + "".join(f"{name}\n" for name in self.spec.modules_load))
        self.write(NODE_INIT, NODEINIT_SOURCE.read_text(), mode=0o755)
        if self.spec.systemd:  # its boot and systemctl act as where systemd runs (nodeinit.py)
            self.write(nodeinit.SYSTEMD_MARK, "provision lab: systemctl starts units now (nodeinit.systemctl)\n")
            self.write(nodeinit.SYSTEMCTL, f"#!/bin/sh\nexec /usr/bin/python3 -I {NODE_INIT} --systemctl \"$@\"\n",
                       mode=0o755)
        self.write(NODE_REBOOT, REBOOT, mode=0o755)

    def install_gpus(self) -> None:
        """The simulator in /usr/lib/provision-lab (one zipapp file) with its config at the default path, NODE_SIM
        and /usr/bin/dmesg as wrappers like those `gpusim install` writes (dmesg is the simulated kernel's log: the node shares this
        machine's kernel, whose own ring buffer says nothing of the node's GPUs, and much of this machine).
        With spec.driver, the driver as a package installs it: /usr/bin/nvidia-smi (+ nvidia-persistenced only
        when asked) and its NVML library's version, spec.driver_version, which every boot loads. Without, the
        GPUs alone (the config's driver_version null): no driver loads until a driver package is installed and
        the node rebooted."""
        if not SIM_PACKAGE.exists():
            raise LabError(f"the GPU simulator {SIM_PACKAGE} is missing")
        config = {"driver_version": self.spec.driver_version if self.spec.driver else None, "gpus": self.spec.gpus,
                  "numa_nodes": self.spec.numa_nodes, "nics": self.spec.rdma,
                  **({"psu_watts": self.spec.psu_watts} if self.spec.psu_watts else {}),
                  **({"board": self.spec.board} if self.spec.board else {})}
        self.write(NODE_SIM_CONFIG, json.dumps(config, indent=2) + "\n")
        self.write(NODE_SIM_ZIPAPP, simzip.zipapp())
        programs = [NODE_SIM, DMESG]
        if self.spec.driver:
            programs += [NVIDIA_SMI, *([NVIDIA_PERSISTENCED] * self.spec.persistenced)]
            self.write(NODE_NVML_LIBRARY, f"{self.spec.driver_version}\n")
        for path in programs:
            self.write(path, simzip.sim_wrapper(path), mode=0o755)

    def serve_apt_repo(self, apt_repo: Path) -> None:
        """The lab's apt repository, read-only at APT_REPO_IN_NODE: the file: source the image lists."""
        mount_point = self.root / APT_REPO_IN_NODE.lstrip("/")
        mount_point.mkdir(parents=True, exist_ok=True)
        run(["mount", "--bind", str(apt_repo), str(mount_point)])
        run(["mount", "-o", "remount,bind,ro", str(mount_point)])  # a bind mount takes ro only on a remount

    def write(self, path_in_node: str, content: str | bytes, mode: int = 0o644) -> None:
        """A file of the node's own (in its upper): what the image has there is replaced, a link not followed."""
        path = self.root / path_in_node.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        path.chmod(mode)

    def host_key_line(self) -> str:
        """This node's known_hosts line: its address and name, its ed25519 host key."""
        kind, key = (self.root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"{self.address},{self.spec.name} {kind} {key}\n"

    # --- processes -----------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> None:
        """Power on: the node's supervisor starts, and boots the node (GPUs reset, boot units, sshd) in the
        background. Returns once the supervisor is in the node's network namespace, where a power cut finds it."""
        if netns.netns_pids(self.ns):
            raise LabError(f"{self.spec.name} is already running")
        argv = ["nsenter", f"--net={NETNS_DIR / self.ns}", "--", sys.executable, "-c", SUPERVISOR,
                str(SOURCE_ROOT), str(self.dir.parents[1]), str(self.net.slot), json.dumps(self.to_state())]
        with open(self.dir / "console.log", "a") as console:
            supervisor = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                          start_new_session=True)  # outlives this command: the lab keeps running
        deadline = time.monotonic() + timeout
        while supervisor.pid not in netns.netns_pids(self.ns):  # nsenter execs it: the same pid
            if supervisor.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"{self.spec.name}: its supervisor did not start (see {self.dir / 'console.log'})")
            time.sleep(0.01)

    def boot(self) -> subprocess.Popen[bytes]:
        """One boot, in fresh cgroups (a previous boot's go first, once their processes have): the node's
        processes from the cgroup join on, a child of this process that ends when the node does."""
        remove_cgroups(self.cgroups_file)
        joined = make_cgroups(self.ns, self.cgroups_file)
        argv = ["sh", "-c", JOIN, "join", *(str(p / "cgroup.procs") for p in joined), "--",  # (ip netns exec
                "ip", "netns", "exec", self.ns,  # remounts /sys: the cgroup files are gone there)
                "unshare", *(["--cgroup"] if joined else []), *fresh_clocks(), "--uts", "--pid", "--mount", "--fork",
                "--propagation", "private", "--kill-child=SIGKILL", "sh", "-c", SETUP, "setup",
                str(self.root), self.spec.name]
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL)  # its output: the supervisor's, the console log

    def stop(self) -> int:
        """Power cut: every process of the node, its supervisor among them, SIGKILL, then its cgroups go.
        Returns how many were killed."""
        killed = netns.kill_namespace_processes(self.ns)
        remove_cgroups(self.cgroups_file)
        return killed

    @property
    def cgroups_file(self) -> Path:
        """The node's cgroup directories on this machine, one a line, while it has them."""
        return self.dir / "cgroups"

    def init_pid(self) -> int | None:
        return netns.ns_init_pid(self.ns)

    def wait_ssh(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ssh_port_open():
            if time.monotonic() > deadline:
                tail = (self.dir / "console.log").read_text()[-1500:] if (self.dir / "console.log").exists() else ""
                raise LabError(f"{self.spec.name}: sshd did not come up on {self.address}:22 within "
                               f"{timeout:g}s; console:\n{tail}")
            time.sleep(0.1)

    def ssh_port_open(self) -> bool:
        try:
            with socket.create_connection((self.address, 22), timeout=0.5) as sock:
                return sock.recv(4).startswith(b"SSH-")  # sshd itself answered, not just a listen backlog
        except OSError:
            return False

    def processes(self) -> dict[int, str]:
        """pid -> command name, for every process of the node."""
        found = {}
        for pid in netns.netns_pids(self.ns):
            try:
                found[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                pass
        return found

    def shape_link(self, nic: str, mbps: int) -> None:
        """Its fabric NIC `nic` carrying what a port of `mbps` would, scaled as every lab link is (netns.shape)."""
        netns.shape(self.net, self.spec.name, self.spec.index, self.spec.nics.index(nic), nic, mbps)

    def exec(self, argv: list[str], check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run argv inside the running node: its namespaces, its root, its environment."""
        pid = self.init_pid()
        if pid is None:
            raise LabError(f"{self.spec.name} is powered off: `provision lab reboot {self.spec.name}` starts it")
        return run(["nsenter", "-t", str(pid), "-m", "-u", "-n", "-p", "-r", "-w", *(["-T"] if TIME_NS else []), "--",
                    "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", *argv], check=check, timeout=timeout)

    def gpusim(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.exec([NODE_SIM, *args])

    def to_state(self) -> dict[str, Any]:
        return asdict(self.spec)


TIME_NS = os.path.exists("/proc/self/ns/time")  # Linux 5.6+: a clock namespace per node


def fresh_clocks() -> list[str]:
    """unshare's options for a node's own boot clock: in a time namespace whose CLOCK_BOOTTIME and MONOTONIC
    start near 0 at each boot, so its /proc/uptime (and the process start times in /proc/PID/stat, which the
    facts batch reads to tell a daemon's age) are its own, not this machine's. [] where the kernel has none."""
    if not TIME_NS:
        return []
    since_boot = int(time.clock_gettime(time.CLOCK_BOOTTIME))
    return ["--time", "--boottime", str(-since_boot), "--monotonic", str(-int(time.monotonic()))]


# The node's supervisor: supervisor.supervise, in a fresh interpreter that imports this very checkout.
SUPERVISOR = ("import sys; sys.path.insert(0, sys.argv[1]); from provision_lab import supervisor; "
              "supervisor.supervise(*sys.argv[2:])")


# /usr/sbin/reboot in a node (the image has none: systemd-sysv's, a link to systemctl, would refuse without
# systemd): what `reboot -f` does in the end, sync and reboot(2) with RB_AUTOBOOT, which systemctl does itself
# when forced twice. Only in a lab node (its PID 1 is the lab's init): there reboot(2) ends the node's PID
# namespace, never this machine. It takes the seconds a machine takes to go down and through its firmware:
# slurmctld (22.05) counts a reboot it issued as done only when the node's boot time, now less its uptime in
# whole seconds rounded up, is not before the second it asked; a node back within that second stays
# REBOOT_ISSUED until ResumeTimeout.
REBOOT = """#!/bin/sh
# provision lab: reboot this node now (sync, then reboot(2)); the lab boots it again.
grep -qa provision-lab-init /proc/1/cmdline || { echo "reboot: not a provision lab node" >&2; exit 1; }
sync
sleep 3
exec systemctl reboot --force --force
"""


HOSTS_FROM_FILES = "hosts:          files"


def nsswitch_file(image_text: str) -> str:
    """The image's /etc/nsswitch.conf with hosts looked up in /etc/hosts alone: the lab has no DNS. An address
    that file does not name is then "not found" at once, as a cluster's DNS answers it, and getnameinfo gives
    the number. With Debian's "files dns" the lookup went on to the resolver the image copied from this
    machine, which no node can reach: "Temporary failure in name resolution" (EAI_AGAIN). torch's c10d printed
    "The hostname of the client socket cannot be retrieved. err=-3" for each connection to its store: they
    name it by an IPv4-mapped IPv6 address, which the IPv4 lines of /etc/hosts do not name."""
    lines = [HOSTS_FROM_FILES if line.split(":")[0].strip() == "hosts" else line for line in image_text.splitlines()]
    if HOSTS_FROM_FILES not in lines:
        lines.append(HOSTS_FROM_FILES)
    return "\n".join(lines) + "\n"


def hosts_file(name: str, nodes: tuple[tuple[str, str], ...]) -> str:
    """/etc/hosts as a cluster's machines have it: every node's name at its address (its own too: a
    process that looks its host up gets an address the others reach, as torch.distributed's gloo does),
    else Debian's 127.0.1.1 line for a node alone."""
    text = "127.0.0.1 localhost\n"
    if not any(node == name for _address, node in nodes):
        text += f"127.0.1.1 {name}\n"
    if nodes:
        text += "# provision lab: its nodes (management addresses), as the cluster's DNS would have them\n"
        text += "".join(f"{address} {node}\n" for address, node in nodes)
    return text + "::1 localhost ip6-localhost ip6-loopback\n"


"""A lab: real Debian nodes on this machine (namespaces + overlay + chroot + sshd + simulated GPUs).

Layout of a lab directory (default /var/lib/provision-lab/default):

  state.json          what was made (written before anything is made, so a crash can be undone)
  inventory.yaml      the lab's inventory (Ansible shape), for `provision apply/facts`
  ssh_config          one Host per node + the lab subnet: root, the lab key, the lab's known_hosts
  known_hosts         every node's host key (the tool checks host keys strictly)
  id_ed25519(.pub)    the lab's client key, authorized as root on every node
  nodes/NAME/         upper/ + work/ (the node's disk), root/ (the overlay mount, the lab's apt repository
                      mounted read-only in it at /srv/provision-lab/apt), console.log (its boots, and its
                      supervisor's word when it rebooted itself), cgroups (the node's cgroup directories on this
                      machine, while it runs)

Each node's disk is its upper/ over the lab's Python layer (torch, pylayer.py; not for a node with
provision_custom.lab.torch: false) over the Debian image, both cached under /var/cache/provision-lab; a node with
provision_custom.lab.provision: true has the provision layer (this checkout, pylayer.py) above those.

`down` undoes a lab from its state file AND from names (the "plab<slot>-"
prefix, the management bridge's alias = this directory), so a half-made lab
is cleaned as well.

The state file and slots: state.py; what each fault does: faults.py; one node: node.py.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from provision_lab import aptrepo, faults, netns, pylayer, rootfs
from provision_lab.cgroups import remove_cgroups
from provision_lab.layout import SIM_PACKAGE
from provision_lab.model import LabSpec
from provision_lab.netns import LabNet
from provision_lab.node import Node
from provision_lab.state import LabDir, machine_lock
from provision_lab.system import LabError, mounts_under, remove_tree, require_host, run

FILES = ("inventory.yaml", "ssh_config", "known_hosts", "id_ed25519", "id_ed25519.pub")
KEY = "id_ed25519"


class Lab(LabDir):
    """A lab's lifecycle: up, down, status, reboot, faults (its directory and state file: LabDir)."""

    # --- up ------------------------------------------------------------------------------------

    def up(self, spec: LabSpec, log=print) -> bool:
        """Start the lab. False when this very lab is already up (nothing done)."""
        require_host()
        if set(str(self.dir)) & set(",: \t\n"):
            raise LabError(f"--dir {self.dir}: a lab directory cannot contain commas, colons or spaces "
                           "(they would break the overlay mount options)", 2)
        if not SIM_PACKAGE.exists():
            raise LabError(f"the GPU simulator {SIM_PACKAGE} is missing (nodes install it as nvidia-smi)", 2)
        with machine_lock():
            state = self.state()
            if state and state.get("phase") == "up":
                if state.get("nodes") != spec.layout():
                    raise LabError(f"a different lab is up in {self.dir} ({state.get('source')}): "
                                   f"`provision lab down{self.dir_option()}` first", 2)
                self._note_older_provision(state, spec, log)
                return False
            if state or self.slots_with_traces():
                log(f"A half-made lab is in {self.dir} (a crash?): cleaning it first.")
                self._teardown(log)
            image = rootfs.ensure_image(log)
            apt_repo = aptrepo.ensure_repo(image, log)  # before anything is made: a failed fetch leaves nothing
            torch = pylayer.ensure_torch_layer(log) if any(n.torch for n in spec.nodes) else None
            provision = pylayer.ensure_provision_layer(log) if any(n.provision for n in spec.nodes) else None
            self.dir.mkdir(parents=True, exist_ok=True)
            state = {"version": 1, "phase": "starting", "slot": self.free_slot(), "source": spec.source,
                     "image": str(image), "apt_repo": str(apt_repo), "torch_layer": torch and str(torch),
                     "provision_layer": provision and str(provision), "nodes": spec.layout(), "faults": {}}
            self.save(state)
            try:
                self._make(state, spec, image, apt_repo, log)
            except BaseException:
                log("lab up failed: removing what it made ...")
                self._teardown(lambda message: None)
                raise
            state["phase"] = "up"
            self.save(state)
            return True

    def _make(self, state: dict[str, Any], spec: LabSpec, image: Path, apt_repo: Path, log) -> None:
        net = LabNet(state["slot"])
        started = time.monotonic()
        public_key = self._client_key()
        netns.make_bridges(net, max(len(n.nics) for n in spec.nodes), self.dir)
        nodes = [Node(s, net, self.dir) for s in spec.nodes]
        log(f"Making {len(nodes)} node(s) in {self.dir} (slot {net.slot}, management {net.controller}/24) ...")

        torch = Path(state["torch_layer"]) if state.get("torch_layer") else None
        provision = Path(state["provision_layer"]) if state.get("provision_layer") else None
        hosts = tuple((n.address, n.spec.name) for n in nodes)

        def make(node: Node) -> None:
            layers = (*((provision,) if provision and node.spec.provision else ()),
                      *((torch,) if torch and node.spec.torch else ()))  # topmost first
            node.create(image, apt_repo, public_key, layers, hosts)  # the apt repository: a read-only mount in each
            netns.add_node(net, node.spec.name, node.spec.index, node.spec.nics)
            node.start()

        timeout = 30 + 0.5 * len(nodes)
        with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
            list(pool.map(make, nodes))  # mostly waiting on subprocesses: threads overlap them
            list(pool.map(lambda n: n.wait_ssh(timeout), nodes))
        self._write_client_files(nodes, spec)
        log(f"{len(nodes)} node(s) up in {time.monotonic() - started:.1f}s")

    def _note_older_provision(self, state: dict[str, Any], spec: LabSpec, log) -> None:
        """A running lab keeps the provision layer it was made with: say so when the checkout has changed."""
        made_with = state.get("provision_layer")
        if not made_with or not any(n.provision for n in spec.nodes):
            return
        try:
            now = pylayer.provision_layer_path() / "root"
        except LabError:
            return
        if Path(made_with) != now:
            log(f"The lab in {self.dir} runs provision from an older checkout ({Path(made_with).parent.name}; "
                f"now {now.parent.name}): `provision lab down{self.dir_option()}` and up again for the new one.")

    def _client_key(self) -> str:
        key = self.dir / KEY
        if not key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"provision-lab@{self.dir}", "-f", str(key)])
        return key.with_suffix(".pub").read_text()

    def _write_client_files(self, nodes: list[Node], spec: LabSpec) -> None:
        (self.dir / "known_hosts").write_text("".join(n.host_key_line() for n in nodes))
        common = (f"  User root\n  IdentityFile {self.dir / KEY}\n  IdentitiesOnly yes\n"
                  f"  UserKnownHostsFile {self.dir / 'known_hosts'}\n  StrictHostKeyChecking yes\n")
        net = nodes[0].net
        text = f"# provision lab in {self.dir}: written by `provision lab up`.\n"
        text += "".join(f"Host {n.spec.name}\n  HostName {n.address}\n" for n in nodes)
        text += f"\nHost {' '.join(n.spec.name for n in nodes)} 10.213.{net.slot}.*\n{common}"
        self.ssh_config_path.write_text(text)
        self.inventory_path.write_text(inventory_text(spec, self.dir, net))

    # --- down ----------------------------------------------------------------------------------

    def down(self, log=print) -> list[str]:
        """Remove everything this lab made; what was removed, in words."""
        require_host()
        with machine_lock():
            return self._teardown(log)

    def _teardown(self, log) -> list[str]:
        removed = []
        slots = self.slots_with_traces()
        namespaces = [ns for slot in slots for ns in netns.lab_namespaces(LabNet(slot).prefix)]
        for ns in namespaces:  # power off first: nothing may hold the mounts below
            killed = netns.kill_namespace_processes(ns)
            removed += [f"process of {ns}"] * killed
        for record in sorted((self.dir / "nodes").glob("*/cgroups")):  # the processes are gone: their cgroups go
            left = remove_cgroups(record)
            removed += [f"cgroup {record.parent.name}"]
            if left:
                log(f"could not remove cgroup(s) {', '.join(left)} (still in use?): rmdir them when they are empty")
        mounts = mounts_under(self.dir / "nodes")
        for point in mounts:
            if run(["umount", point], check=False).returncode != 0:
                run(["umount", "--lazy", point])
        removed += [f"mount {m}" for m in mounts]
        for ns in namespaces:
            netns.delete_namespace(ns)
        removed += [f"namespace {ns}" for ns in namespaces]
        for slot in slots:
            removed += [f"link {name}" for name in netns.delete_links(LabNet(slot).prefix)]
        remove_tree(self.dir / "nodes")
        for name in FILES:
            (self.dir / name).unlink(missing_ok=True)
        self._check_gone(slots)
        self.state_file.unlink(missing_ok=True)  # last: while anything is left, the state says where
        if self.dir.is_dir() and not any(self.dir.iterdir()):
            self.dir.rmdir()
        if removed:
            kinds = Counter(line.split()[0] for line in removed)
            log("Removed " + ", ".join(f"{n} {kind}{'es' if kind == 'process' else 's'}" for kind, n in kinds.items()))
        return removed

    def _check_gone(self, slots: set[int]) -> None:
        left = [f"namespace {ns}" for s in slots for ns in netns.lab_namespaces(LabNet(s).prefix)]
        left += [f"link {link['ifname']}" for s in slots for link in netns.lab_links(LabNet(s).prefix)]
        left += [f"mount {m}" for m in mounts_under(self.dir)]
        if left:
            raise LabError(f"could not remove: {', '.join(left)}; run `provision lab down{self.dir_option()}` "
                           "again, or remove them by hand (ip netns delete / ip link delete / umount)")

    # --- status, reboot, faults ------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The lab as it is now: per node, power, sshd, GPUs visible vs configured, faults."""
        require_host()
        state = self.state()
        if not state:
            return {"dir": str(self.dir), "phase": "down", "nodes": []}
        nodes = self.nodes(state) if isinstance(state.get("slot"), int) else []
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(nodes)))) as pool:
            rows = list(pool.map(lambda n: self._node_status(n, state), nodes))
        return {"dir": str(self.dir), "phase": state.get("phase"), "slot": state.get("slot"),
                "source": state.get("source"), "inventory": str(self.inventory_path),
                "ssh_config": str(self.ssh_config_path), "nodes": rows}

    def _node_status(self, node: Node, state: dict[str, Any]) -> dict[str, Any]:
        running = node.init_pid() is not None
        visible = None
        if running:
            out = node.exec(["nvidia-smi", "-L"], check=False, timeout=30).stdout
            visible = sum(1 for line in out.splitlines() if line.startswith("GPU "))
        return {
            "name": node.spec.name, "address": node.address, "netns": node.ns,
            "fabric": {nic: node.net.fabric_address(k, node.spec.index) for k, nic in enumerate(node.spec.nics)},
            "power": "on" if running else "off",
            "sshd": running and "sshd" in node.processes().values() and node.ssh_port_open(),
            "gpus": node.spec.describe_gpus(), "gpus_configured": node.spec.gpu_count, "gpus_visible": visible,
            "faults": state.get("faults", {}).get(node.spec.name, []),
        }

    def reboot(self, name: str, log=print) -> float:
        """Power-cycle one node: its processes die, GPUs reset, boot units run again, sshd comes back."""
        require_host()
        with machine_lock():
            state, node = self.node(name)
            started = time.monotonic()
            node.stop()
            node.start()
            node.wait_ssh()
            self._booted(state, node)
            return time.monotonic() - started

    def booted_again(self, name: str) -> None:
        """A node rebooted itself and its supervisor booted it again: once it is up, as after `reboot`."""
        _state, node = self.node(name)
        node.wait_ssh()
        with machine_lock():
            state, node = self.node(name)
            self._booted(state, node)

    def _booted(self, state: dict[str, Any], node: Node) -> None:
        """The faults a boot ends leave the record; what stays is set up again where the node's boot undid it."""
        faults.after_boot(node, state.get("faults", {}).get(node.spec.name, []))
        self.save(state)

    def fault(self, name: str, kind: str, gpu: int | None = None, nic: str | None = None,
              link: int | None = None, port: str | None = None, watts: int | None = None) -> str:
        """Inject a fault for a drill (or clear them all); what was done, in words."""
        require_host()
        with machine_lock():
            state, node = self.node(name)
            recorded = state.setdefault("faults", {}).setdefault(name, [])
            if kind == "clear":
                done = faults.clear(node, recorded)
                recorded.clear()
            else:
                done = faults.inject(node, kind, gpu, nic, link, port, watts)
                recorded.append(done)
            self.save(state)
            return done


def inventory_text(spec: LabSpec, lab_dir: Path, net: LabNet) -> str:
    """The lab's inventory file: a header saying how to use it and what each node is, then the YAML."""
    lab_dir = Path(lab_dir)
    header = [f"# provision lab in {lab_dir} ({spec.source}): written by `provision lab up`.",
              f"# Use: provision apply {lab_dir / 'inventory.yaml'}   (its hosts use the lab's ssh_config)",
              *(f"#   {n.name}: {net.mgmt_address(n.index)}, {n.describe_gpus()}, NICs {' '.join(n.nics)}"
                for n in spec.nodes)]
    addresses = {n.name: net.mgmt_address(n.index) for n in spec.nodes}
    body = yaml.safe_dump(spec.inventory(addresses, str(lab_dir / "ssh_config")), sort_keys=False, default_flow_style=None,
                          width=120)  # leaf mappings on one line, as people write them
    return "\n".join(header) + "\n" + body

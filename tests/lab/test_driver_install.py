"""The NVIDIA driver end to end on three lab nodes without one (tests/lab/driver.yaml): apply installs the pinned
version from a local apt repository and holds it; the module loads only at the next boot, so the reboot is
pending until `apply --reboot --serial 1` reboots the nodes one at a time; an upgrade and a downgrade go the
same way; a package that does not exist fails and leaves the node as it was; the machine running provision and a
node that does not come back stop the rollout."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
# The README's commands (tests/docs/test_readme.py: place "driver"), run as written in this test's lab directory.
SHOWN_DIR = "/var/lib/provision-lab/driver"
README_UP = f"provision lab up --like tests/lab/driver.yaml --dir {SHOWN_DIR}"
README_APPLY = f"provision apply {SHOWN_DIR}/inventory.yaml"
README_REBOOT = f"provision apply {SHOWN_DIR}/inventory.yaml --reboot --serial 1"
NODES = ["lab-gpu-1", "lab-gpu-2", "lab-gpu-3"]
LAB_SOURCE = "/etc/apt/sources.list.d/provision-lab.list"  # the lab's own: gone, the inventory's repository serves


@pytest.fixture(scope="module")
def driver_lab(lab_beside):
    def up(cluster):
        made = as_written(README_UP, cluster)
        assert made.returncode == 0, made.stdout + made.stderr
        for node in NODES:  # the driver comes from the inventory's repository alone
            on(cluster, node, f"rm -f {LAB_SOURCE}")

    with lab_beside("driver", up) as cluster:
        yield cluster


def as_written(command: str, lab, *more: str) -> subprocess.CompletedProcess:
    """A README command, from the checkout, in this test's lab directory (and more options after it)."""
    readme = (REPO / "docs" / "how-to" / "driver.md").read_text()
    assert f"    {command}" in readme
    argv = shlex.split(command.replace(SHOWN_DIR, str(lab.dir)))
    return subprocess.run([sys.executable, "-m", "provision", *argv[1:], *more], cwd=REPO, capture_output=True,
                          text=True, timeout=900, stdin=subprocess.DEVNULL)


def on(lab, node: str, command: str, ok: bool = True) -> subprocess.CompletedProcess:
    proc = lab.ssh(node, command)
    assert not ok or proc.returncode == 0, f"{node}: {command}: {proc.stdout}{proc.stderr}"
    return proc


def with_driver(lab, path: Path, **driver) -> Path:
    """A copy of the lab's inventory whose gpu group pins another driver."""
    tree = yaml.safe_load(lab.inventory.read_text())
    tree["all"]["children"]["gpu"]["vars"]["provision_driver"].update(driver)
    path.write_text(yaml.safe_dump(tree))
    return path


def said(data: dict) -> str:
    """What went wrong in an `apply --json`, short: each failed host's message, pending reboot and failed items."""
    lines = []
    for h in data.get("hosts", []) + data.get("after_reboot", []):
        if h["status"] in ("failed", "unreachable"):
            lines.append(f"{h['host']}: {h['status']} {h['message']} pending={h.get('reboot_pending')}")
            lines += [f"  {t['name']}: {t['message']} {[i['message'] for i in t['items'] if i['status'] == 'failed']}"
                      for t in h["tasks"] if t["status"] == "failed"]
    return "\n".join(lines + [f"reboot {r}" for r in data.get("reboots", [])] + [data.get("stderr", "")])


def task(host: dict, name: str) -> dict:
    return next(t for t in host["tasks"] if t["name"] == name)


def loaded(lab, node: str) -> str:
    return on(lab, node, "cat /proc/driver/nvidia/version 2>/dev/null || echo none").stdout.split("\n")[0]


def test_a_fresh_node_gets_the_pinned_driver_held_and_a_pending_reboot(driver_lab):
    ran = as_written(README_APPLY, driver_lab)
    assert ran.returncode == 16, ran.stdout + ran.stderr  # a reboot pending: its own bit, not a failure
    said = " ".join(ran.stdout.split())  # the lines as read, whatever the width they wrapped at
    assert said.count("changed nvidia-driver nvidia-driver-570: driver packages: not installed -> "
                      "570.195.03, loaded at the next boot") == len(NODES)
    assert said.count("pending reboot: driver 570.195.03 is installed, no NVIDIA module is loaded (") == len(NODES)
    assert f"\n{len(NODES)} hosts: {len(NODES)} changed, {len(NODES)} reboot pending\n" in ran.stdout
    for node in NODES:
        assert on(driver_lab, node, "apt-mark showhold").stdout.split() == ["nvidia-driver-570"]
        assert on(driver_lab, node, "cat /etc/apt/sources.list.d/provision-nvidia.list").stdout.endswith(
            "deb [trusted=yes] file:/srv/provision-lab/apt ./\n")
        assert "blacklist nouveau" in on(driver_lab, node, "cat /etc/modprobe.d/provision-blacklist-nouveau.conf").stdout
        assert on(driver_lab, node, "nvidia-smi", ok=False).returncode == 9  # installed, not loaded
        assert loaded(driver_lab, node) == "none"
    print(ran.stdout)


def test_a_rerun_changes_nothing_and_still_says_the_reboot_is_pending(driver_lab):
    code, data = driver_lab.apply()
    assert code == 16
    for host in data["hosts"]:
        assert all(t["status"] != "changed" for t in host["tasks"]), host
        assert task(host, "nvidia-driver")["status"] == "ok"
        assert host["reboot_pending"] == ["driver 570.195.03 is installed, no NVIDIA module is loaded"]


def test_reboot_serial_one_reboots_each_node_after_the_last_is_back(driver_lab):
    ran = as_written(README_REBOOT, driver_lab)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    print(ran.stdout)
    code, data = driver_lab.apply("--reboot", "--serial", "1")  # nothing pending now: nothing rebooted
    assert code == 0 and data["reboots"] == [] and data["after_reboot"] == []
    assert all(h["status"] == "ok" for h in data["hosts"])
    for node in NODES:
        assert "570.195.03" in loaded(driver_lab, node)
        assert on(driver_lab, node, "nvidia-smi --query-gpu=driver_version,persistence_mode,power.limit "
                                    "--format=csv,noheader").stdout.split("\n")[0] == "570.195.03, Enabled, 200.00 W"


def test_the_rollout_json_shows_the_order_and_timing(driver_lab, tmp_path):
    inventory = with_driver(driver_lab, tmp_path / "580.yaml", version="580.159.04")
    code, data = driver_lab.apply("--reboot", "--serial", "1", inventory=inventory)
    assert code == 0, said(data)
    reboots = data["reboots"]
    assert [r["host"] for r in reboots] == NODES and [r["batch"] for r in reboots] == [1, 2, 3]
    assert all(r["status"] == "rebooted" and r["loaded_after"] == "580.159.04" for r in reboots)
    for earlier, later in zip(reboots, reboots[1:]):
        assert earlier["back"] <= later["sent"]  # one node down at a time
    assert [h["status"] for h in data["after_reboot"]] == ["ok"] * 3
    for r in reboots:
        print(f"{r['host']}: batch {r['batch']}, sent +{r['sent']} s, down +{r['down']} s, back +{r['back']} s "
              f"({r['seconds']} s), loaded {r['loaded_after']}")


def test_never_the_machine_running_provision_and_a_node_that_does_not_come_back_stops_the_rollout(driver_lab):
    code, data = driver_lab.apply()  # the lab's inventory pins 570 again: a downgrade, every node waits for a boot
    assert code == 16 and all(h["reboot_pending"] for h in data["hosts"]), said(data)
    me = Path("/etc/machine-id").read_text()
    saved = driver_lab.node_file(NODES[0], "/etc/machine-id").read_text()
    driver_lab.node_file(NODES[0], "/etc/machine-id").write_text(me)  # as if it were this machine
    on(driver_lab, NODES[1], "mv /usr/sbin/reboot /usr/sbin/reboot.real && ln -s /bin/true /usr/sbin/reboot")
    try:
        code, data = driver_lab.apply("--reboot", "--serial", "1", "--reboot-timeout", "10")
        refused, stuck, never = data["reboots"]
        assert refused["status"] == "refused" and "the machine running provision" in refused["message"], refused
        assert stuck["status"] == "not back" and "never went down" in stuck["message"], stuck
        assert never["status"] == "not rebooted" and "lab-gpu-2 did not come back" in never["message"], never
        assert code == 4 | 16 and data["exit_code"] == code  # unreachable (did not come back), reboots pending
        assert all("580.159.04" in loaded(driver_lab, node) for node in NODES)  # none was rebooted
    finally:
        driver_lab.node_file(NODES[0], "/etc/machine-id").write_text(saved)
        on(driver_lab, NODES[1], "mv /usr/sbin/reboot.real /usr/sbin/reboot")
    code, data = driver_lab.apply("--reboot", "--serial", "3")  # the downgrade, all three at once
    assert code == 0 and [r["batch"] for r in data["reboots"]] == [1, 1, 1], said(data)
    assert all("570.195.03" in loaded(driver_lab, node) for node in NODES)


def test_an_upgrade_reports_the_reboot_verify_names_it_and_reboot_clears_it(driver_lab, tmp_path):
    node = NODES[0]
    inventory = with_driver(driver_lab, tmp_path / "580.yaml", version="580.159.04")
    code, data = driver_lab.apply("--limit", node, inventory=inventory)
    (host,) = data["hosts"]
    assert code == 16 and task(host, "nvidia-driver")["status"] == "changed" and host["status"] == "changed"
    assert host["reboot_pending"] == ["driver 580.159.04 is installed, 570.195.03 is loaded "
                                      "(nvidia-smi: Driver/library version mismatch)"]
    assert on(driver_lab, node, "nvidia-smi", ok=False).returncode == 18
    layout = task(host, "gpu-layout")  # nvidia-smi lists no GPU until the boot: no card is "gone"
    assert layout["status"] == "skipped" and "the GPUs wait for a reboot" in layout["message"], layout
    verify = driver_lab.provision("verify", str(inventory), "--ssh-config", str(driver_lab.ssh_config),
                                  "--limit", node)
    assert verify.returncode == 1 and "driver_loaded_is_the_pinned_version" in verify.stdout, verify.stdout
    assert "is gone" not in verify.stdout and "exit 18" in verify.stdout
    assert "reboot pending: driver 580.159.04 is installed, 570.195.03 is loaded" in verify.stdout
    code, data = driver_lab.apply("--limit", node, "--reboot", inventory=inventory)
    assert code == 0 and data["reboots"][0]["loaded_after"] == "580.159.04", said(data)
    verify = driver_lab.provision("verify", str(inventory), "--ssh-config", str(driver_lab.ssh_config),
                                  "--limit", node)
    assert verify.returncode == 0, verify.stdout


def test_a_package_that_does_not_exist_fails_and_leaves_the_node_as_it_was(driver_lab, tmp_path):
    node = NODES[0]
    before = on(driver_lab, node, "dpkg-query -W 'nvidia-driver*'; apt-mark showhold").stdout
    for name, driver in (("no-such-branch", {"version": "575.64.05"}), ("no-such-version", {"version": "580.1.1"})):
        inventory = with_driver(driver_lab, tmp_path / f"{name}.yaml", **driver)
        code, data = driver_lab.apply("--limit", node, inventory=inventory)
        (host,) = data["hosts"]
        failed = task(host, "nvidia-driver")
        assert code == 1 and failed["status"] == "failed", host
        said = " ".join(i["message"] for i in failed["items"])
        assert ("Unable to locate package nvidia-driver-575" in said if name == "no-such-branch"
                else "Version '580.1.1-*' for 'nvidia-driver-580' was not found" in said), said
        assert on(driver_lab, node, "dpkg-query -W 'nvidia-driver*'; apt-mark showhold").stdout == before
        assert "580.159.04" in loaded(driver_lab, node)


def test_a_branch_that_cannot_drive_the_v100s_is_bad_input_before_any_change(driver_lab, tmp_path):
    node = NODES[0]
    before = on(driver_lab, node, "dpkg-query -W 'nvidia-driver*'; apt-mark showhold").stdout
    inventory = with_driver(driver_lab, tmp_path / "590.yaml", version="590.48.01")
    code, data = driver_lab.apply("--limit", node, inventory=inventory)
    assert code == 2 and "580 is their last branch" in data["stderr"] and "no host was touched" in data["stderr"]
    assert on(driver_lab, node, "dpkg-query -W 'nvidia-driver*'; apt-mark showhold").stdout == before

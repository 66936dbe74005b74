"""verify --active on the V100 box with a weak power supply (issue 27, lab test a): a lab of its own, one node of
4x V100 whose supplies give the GPUs 900 W (custom.lab.psu_watts), the load the GPU simulator's stand-in
(active.load_command: `gpusim load`; load_model.py: boost transients 1.35x the averaged draw, pinned clocks
ripple 2%). With the inventory's fix (persistence, 200 W, application clocks 877,1005) the node passes under
load; with the clocks left out, the transients of four GPUs at their 200 W cap pass 900 W, one GPU falls off
the bus, and verify names it, its peak power and the fix, with the passive checks' failures under it.

Its own lab (PROVISION_ACTIVE_LAB_DIR, default /var/lib/provision-lab/active), made and taken down here; no
torch layer, so it is up in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision.lab.system import mounts_under

pytestmark = pytest.mark.lab

LAB_DIR = Path(os.environ.get("PROVISION_ACTIVE_LAB_DIR", "/var/lib/provision-lab/active"))
NODE = "lab-v100-1"
CHECK = "gpus_hold_up_under_load"
FIXED = {"persistence": True, "power_limit": 200, "clocks": {"mem": 877, "sm": 1005}}
INVENTORY = {"all": {"hosts": {"v100-1": {
    "gpu": FIXED,
    "active": {"load_command": ["/usr/lib/provision-lab/gpusim", "load"], "power_budget_watts": 900},
    "custom": {"lab": {"torch": False, "gpus": [{"model": "v100-sxm2-16gb", "count": 4}], "psu_watts": 900}}}}}}


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "1000"})


def lab(*args: str) -> str:
    proc = run("-m", "provision.lab.cli", *args, "--dir", str(LAB_DIR))
    assert proc.returncode == 0, f"lab {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def on_node(command: str) -> str:
    proc = subprocess.run(["ssh", "-F", str(LAB_DIR / "ssh_config"), "-o", "BatchMode=yes", NODE, command],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def inventory(gpu: dict) -> Path:
    """The lab's own inventory (its hosts at their lab addresses, through its ssh_config) with this gpu block."""
    tree = yaml.safe_load((LAB_DIR / "inventory.yaml").read_text())
    tree["all"]["hosts"][NODE]["gpu"] = gpu
    path = LAB_DIR / "active.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


@pytest.fixture(scope="module")
def active_lab(tmp_path_factory):
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("the lab needs root on Linux (namespaces, bridges, mounts)")
    from provision.lab.aptrepo import ensure_repo
    from provision.lab.rootfs import ensure_image
    from provision.lab.system import LabError

    try:
        ensure_repo(ensure_image(log=lambda message: None), log=lambda message: None)
    except LabError as exc:
        pytest.skip(f"the lab's image or apt repository cannot be built here (Debian mirror?): {exc}")
    spec = tmp_path_factory.mktemp("active") / "v100.yaml"
    spec.write_text(yaml.safe_dump(INVENTORY))
    lab("down")
    try:
        lab("up", "--like", str(spec))
        yield LAB_DIR
    finally:
        lab("down")
    assert mounts_under(LAB_DIR) == []


def verify_active(path: Path) -> tuple[int, dict]:
    proc = run("-m", "provision", "verify", str(path), "--active", "--duration", "6", "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["hosts"][0]


def test_the_basement_fix_holds_under_load_and_without_the_clocks_a_gpu_falls_off(active_lab):
    fixed = inventory(FIXED)
    applied = run("-m", "provision", "apply", str(fixed))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    code, verdict = verify_active(fixed)
    assert code == 0 and verdict["failures"] == [], verdict["failures"]
    assert CHECK in verdict["passed"]

    # Someone drops the clocks from the inventory and resets them on the node: the power limit alone is left
    unpinned = inventory({"persistence": True, "power_limit": 200})
    applied = run("-m", "provision", "apply", str(unpinned))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    on_node("nvidia-smi -rac")
    code, verdict = verify_active(unpinned)
    assert code == 1
    lost = [f for f in verdict["findings"] if f["check"] == CHECK and f["severity"] == "critical"]
    assert len(lost) == 1, verdict["findings"]
    [finding] = lost
    assert "lost under load" in finding["found"] and "peak" in finding["found"] and "200 W cap" in finding["found"]
    assert "past the 900 W active.power_budget_watts gives them" in finding["found"]
    assert "pin the clocks" in finding["next_step"]
    under = {c["check"] for c in finding["consequences"]}
    assert "no_gpu_is_lost" in under, finding  # the passive checks' view of the same GPU, under this finding
    assert not [f for f in verdict["findings"] if f["check"] == "no_gpu_is_lost"]
    assert "Xid" in on_node("dmesg") and "79" in on_node("dmesg")


def test_a_bad_riser_logs_only_under_load_and_is_named_by_its_bus(active_lab):
    lab("reboot", NODE)  # the GPU the last test lost is back, its kernel log new
    fixed = inventory(FIXED)
    applied = run("-m", "provision", "apply", str(fixed))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    lab("fault", NODE, "gpu-bad-riser", "--gpu", "1")
    try:
        at_rest = run("-m", "provision", "verify", str(fixed), "--json")
        assert at_rest.returncode == 0, at_rest.stdout  # nothing to see at rest
        code, verdict = verify_active(fixed)
        assert code == 1
        [finding] = verdict["findings"]
        assert finding["check"] == "no_pcie_errors_on_the_gpu_links_since_boot", verdict["findings"]
        assert "0000:11:00" in finding["found"] and "RxErr" in finding["found"]
        [during] = finding["consequences"]
        assert during["check"] == CHECK and during["about"] == ["0000:11:00"]
        assert "during the load: aer corrected" in during["found"]
    finally:
        lab("fault", NODE, "clear")

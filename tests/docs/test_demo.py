"""`provision demo`, the README's first command: run as a new user runs it, from an empty directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from provision.commands.demo import BASEMENT_V100_GPU, sandboxed_playbook
from provision.inventory.load import load_inventory, local_inventory
from provision.commands.playbook import load_playbook
from provision.core.resources import shipped, templates_dir
from provision.capabilities.gpu.boot import BootConf
from provision.capabilities.system.files import TemplateFile
from provision.capabilities.system.services import ServiceEnabled

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PATHS = ("/etc/provision/gpu-tuning.conf", "/usr/local/sbin/provision-gpu-tuning",
                "/etc/systemd/system/provision-gpu-tuning.service")


def steps(output: str) -> dict[str, str]:
    """The demo's output per step, keyed by the step's comment."""
    parts = re.split(r"^\$ .*?   # (.*)$", output, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def summary(text: str) -> str:
    return re.search(r"basement-v100  (ok=\d+ changed=\d+ failed=\d+ skipped=\d+)", text).group(1)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    before = {p: os.path.exists(p) for p in SYSTEM_PATHS}
    proc = subprocess.run([sys.executable, "-m", "provision", "demo"], cwd=tmp_path_factory.mktemp("fresh"),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "1000"})  # a line per change, whatever this terminal is
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {p: os.path.exists(p) for p in SYSTEM_PATHS} == before, "the demo wrote outside its own root"
    return steps(proc.stdout)


def test_the_demo_converges_the_whole_basement_fix_then_changes_nothing(demo):
    titles = list(demo)
    first, second = demo[titles[1]], demo[titles[2]]
    assert summary(first) == "ok=0 changed=8 failed=0 skipped=5"
    for line in ("changed      gpu-persistence GPU3: persistence mode: Disabled -> Enabled",
                 "changed      gpu-power-limit GPU3: power limit: 300.00 W -> 200.00 W",
                 "changed      gpu-clocks GPU3: application clocks: 877,1312 -> 877,1005 (-ac)",
                 "unit: not-found -> enabled"):  # planned with the rest, before its unit file was written
        assert line in first
    for written in SYSTEM_PATHS:
        assert re.search(rf"changed +[\w-]+ \S*/root{re.escape(written)}: file: absent -> written", first), written
    assert summary(second) == "ok=8 changed=0 failed=0 skipped=5"


def test_after_a_power_cycle_the_boot_unit_brings_every_setting_back(demo):
    titles = list(demo)
    forgotten, enabled, boot, last = (demo[t] for t in titles[4:8])
    assert re.search(r"^  3 .* off +300 W \(150\.\.300\) +app 877,1312 ", forgotten, flags=re.M)
    assert enabled.strip() == "enabled"
    assert boot.count("All done.") == 12 and 'Applications clocks set to "(MEM 877, SM 1005)"' in boot
    assert summary(last) == "ok=8 changed=0 failed=0 skipped=5"


def test_the_demo_tunes_what_the_basement_inventory_says_for_its_v100_box():
    basement = load_inventory(REPO / "inventories" / "basement.yaml").hosts["v100-1"].settings.gpu
    demo = local_inventory({"provision_gpu": BASEMENT_V100_GPU}).hosts["localhost"].settings.gpu
    assert demo == basement


def test_the_demo_playbook_is_the_shipped_one_with_every_path_under_its_root(tmp_path):
    shipped_names = [t.name for t in load_playbook(shipped("playbooks") / "gpu.yaml", templates_dir())]
    (tmp_path / "pb.yaml").write_text(__import__("yaml").safe_dump(sandboxed_playbook(tmp_path / "root")))
    tasks = load_playbook(tmp_path / "pb.yaml", templates_dir())
    assert [t.name for t in tasks] == shipped_names
    host = local_inventory({"provision_gpu": BASEMENT_V100_GPU}).hosts["localhost"]
    # The GPU setters' own files (the persistence daemon's drop-in) are not written: the demo has no daemon.
    writers = [t for t in tasks if isinstance(t, (TemplateFile, BootConf, ServiceEnabled))]
    paths = [p for t in writers for p in t.file_paths(host)] + [u.root for t in writers for u in t.unit_names(host)]
    assert len(paths) == 4 and all(p.startswith(str(tmp_path / "root")) for p in paths)


@pytest.mark.parametrize("playbook", sorted(p.name for p in (REPO / "playbooks").glob("*.yaml")))
def test_every_shipped_playbook_loads_with_the_shipped_templates(playbook):
    assert load_playbook(shipped("playbooks") / playbook, templates_dir())

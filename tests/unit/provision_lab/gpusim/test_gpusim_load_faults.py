"""The GPU simulator under load as issue 42 needs it: a locked clock range runs at its top under load (as -lgc's
"range of desired locked GPU clock speed" does on a real GPU), so the 4090 box draws real power in the lab; a weak
power supply fitted on a running node (`gpusim psu`); a PCIe link that trains down only while a load runs."""

from __future__ import annotations

import json
import time

from provision_lab.gpusim import load, load_model

from builders.simulator import Sim, pycache, sim

__all__ = ["pycache", "sim"]  # the fixtures, used by name


def loading(node: Sim, seconds: float = 60.0) -> None:
    """A load running on the node from now, as `gpusim load` marks it in the state."""
    path = node.root / "state.json"
    state = json.loads(path.read_text())
    state["load"] = {"started": time.time(), "until": time.time() + seconds, "lost": []}
    path.write_text(json.dumps(state))


def test_a_locked_range_runs_at_its_top_under_load_held_down_only_by_the_power_limit(sim):
    sim.configure(("rtx-4090", 2))
    for args in (["-pm", "1"], ["-lgc", "210,2520"], ["-i", "1", "-pl", "300"]):
        sim.ok(*args)
    assert [int(c) for c in sim.column("clocks.sm")] == [210, 210]  # idle: the range's bottom
    loading(sim)
    rows = sim.query("clocks.sm,power.draw,clocks_event_reasons.active")
    sm0, watts0, reasons0 = int(rows[0][0]), float(rows[0][1]), int(rows[0][2], 16)
    assert sm0 == 2520 and 300 < watts0 < 400 and reasons0 & 0x4 == 0  # the top, within its 400 W cap
    sm1, reasons1 = int(rows[1][0]), int(rows[1][2], 16)
    assert sm1 < 2520 and reasons1 & 0x4  # the 300 W cap holds it down, and says so (SW Power Cap)
    record = sim.state()["gpus"][0]
    assert load_model.pinned_sm({**record, "locked_gpu": [1200, 1200]}) == 1200
    assert load_model.pinned_sm({**record, "locked_gpu": [210, 3500]}) == 3105  # no higher than it boosts


def test_a_link_that_trains_down_only_under_load(sim):
    sim.configure(("rtx-4090", 2))
    sim.gpusim("fault", "1", "pcie-degraded-under-load")
    assert sim.column("pcie.link.width.current") == ["16", "16"]  # at rest: nothing to see
    loading(sim)
    assert sim.column("pcie.link.width.current") == ["16", "8"]
    sim.gpusim("fault", "1", "clear")
    assert sim.column("pcie.link.width.current") == ["16", "16"]


def test_a_weak_supply_fitted_on_a_running_node_stays_across_reboots_until_clear(sim):
    sim.configure(("v100-sxm2-16gb", 4), psu_watts=2000)
    config = json.loads((sim.root / "config.json").read_text())
    assert load.budget_of({}, config) == 2000  # the supplies it was made with
    sim.gpusim("psu", "900")
    sim.gpusim("reboot")
    assert load.budget_of(sim.state(), config) == 900
    sim.gpusim("psu", "clear")
    assert load.budget_of(sim.state(), config) == 2000
    refused = sim.run("psu", "lots")
    assert refused.returncode != 0 and "usage: gpusim psu WATTS|clear" in refused.stderr


def test_the_lab_fits_a_weak_supply_on_a_running_node_and_a_boot_keeps_it():
    from provision_lab import faults
    from builders.labnodes import LabNode

    node = LabNode()
    assert faults.inject(node, "psu-weak", None, None) == "psu-weak 900 W"  # the V100 box's supplies
    assert faults.inject(node, "psu-weak", None, None, watts=1500) == "psu-weak 1500 W"
    assert faults.inject(node, "pcie-degraded-under-load", 0, None) == "pcie-degraded-under-load GPU 0"
    assert node.commands == [["gpusim", "psu", "900"], ["gpusim", "psu", "1500"],
                             ["gpusim", "fault", "0", "pcie-degraded-under-load"]]
    recorded = ["psu-weak 1500 W", "pcie-degraded-under-load GPU 0"]
    faults.after_boot(node, recorded)
    assert recorded == ["psu-weak 1500 W", "pcie-degraded-under-load GPU 0"]  # hardware: a boot ends neither

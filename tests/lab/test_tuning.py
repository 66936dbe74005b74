"""GPU tuning end to end on a lab that mirrors inventories/basement.yaml: V100 (application clocks),
RTX 3090 blades, the RTX 4090 riser box (locked clocks, one hot GPU at a lower limit).

On the `basement` lab (conftest.py); tests run in file order and each leaves it converged.
"""

from __future__ import annotations

import pytest
import yaml

pytestmark = pytest.mark.lab

V100, BLADE, RISERS = "lab-v100-1", "lab-rtx3090-1", "lab-rtx4090-1"
CONF = "/etc/provision/gpu-tuning.conf"


def items(result: dict, host: str, task: str) -> dict[str, dict]:
    return {i["target"]: i for h in result["hosts"] if h["host"] == host
            for t in h["tasks"] if t["name"] == task for i in t["items"]}


def adhoc(lab, *args: str):
    return lab.provision(*args, "-i", str(lab.inventory), "--ssh-config", str(lab.ssh_config), "--json")


def test_every_basement_model_converges_then_changes_nothing(basement):
    code, first = basement.apply()
    assert code == 0, first
    clocks = items(first, V100, "gpu-clocks")
    assert [clocks[f"GPU{i}"]["after"] for i in range(4)] == ["877,1005 (-ac)"] * 4
    locks = items(first, RISERS, "gpu-locked-clocks")
    assert {g: i["after"] for g, i in locks.items()} == {f"GPU{i}": "210,2520" for i in range(7)}
    power = items(first, RISERS, "gpu-power-limit")
    assert power["GPU3"]["after"] == "300.00 W" and power["GPU0"]["after"] == "400.00 W"
    assert items(first, BLADE, "gpu-boot-unit")["provision-gpu-tuning.service"]["status"] == "changed"

    code, again = basement.apply()
    assert code == 0, again
    assert [h["counts"]["changed"] for h in again["hosts"]] == [0] * len(again["hosts"])
    assert items(again, RISERS, "gpu-locked-clocks")["GPU6"]["status"] == "ok"
    conf = cards(basement.node_file(V100, CONF).read_text())
    assert conf.count("clocks=877,1005") == 4 and conf.count("power_limit=200") == 4


def cards(conf: str) -> str:
    """The boot file's lines for its cards (not those for a card it does not list: model=...)."""
    return "\n".join(line for line in conf.splitlines() if line.startswith("gpu="))


def test_the_settings_come_back_after_a_reboot(basement):
    for node in (V100, RISERS):
        basement.lab("reboot", node)
    facts = basement.facts()
    for gpu in facts[V100]["nvidia"]["gpus"]:
        assert (gpu["persistence"], gpu["power_limit"], gpu["app_clock_mem"], gpu["app_clock_sm"]) == \
               (True, 200.0, 877, 1005)
    risers = facts[RISERS]["nvidia"]["gpus"]
    assert [g["power_limit"] for g in risers] == [400.0, 400.0, 400.0, 300.0, 400.0, 400.0, 400.0]
    assert all(g["locked"] == {"sm": "210,2520"} and g["clock_sm"] <= 2520 for g in risers)
    code, check = basement.apply("--check")
    assert code == 0 and [h["counts"]["changed"] for h in check["hosts"]] == [0] * len(check["hosts"]), check


def test_bad_values_are_refused_on_every_node_before_any_is_touched(basement, tmp_path):
    tree = yaml.safe_load(basement.inventory.read_text())
    groups = tree["all"]["children"]["gpu_nodes"]["children"]
    groups["v100"]["vars"]["provision_gpu"]["clocks"] = {"mem": 877, "sm": 1001}  # not a supported pair
    groups["rtx3090"]["vars"]["provision_gpu"] = {"clocks": {"mem": 9751, "sm": 1500}}  # GeForce: no application clocks
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(tree))
    before = {node: basement.node_file(node, CONF).read_text() for node in (V100, BLADE)}
    code, result = basement.apply(inventory=bad)
    assert code == 2, result
    assert "877,1005" in result["stderr"] and "use provision_gpu.locked_clocks" in result["stderr"]
    assert {node: basement.node_file(node, CONF).read_text() for node in (V100, BLADE)} == before
    assert [g["app_clock_sm"] for g in basement.gpus(V100)] == [1005] * 4


def test_adhoc_commands_on_one_node_and_a_group_then_apply_converges_back(basement):
    done = adhoc(basement, "power", "--watts", "250", "-l", V100, "--gpu", "1")
    assert done.returncode == 0, done.stderr
    assert "the inventory says provision_gpu.power_limit 200" in done.stderr
    assert [g["power_limit"] for g in basement.gpus(V100)] == [200.0, 250.0, 200.0, 200.0]
    conf = cards(basement.node_file(V100, CONF).read_text())
    assert conf.count("power_limit=250") == 1 and conf.count("clocks=877,1005") == 4  # other settings kept

    done = adhoc(basement, "clocks", "--locked", "--sm", "210,1695", "-l", "rtx3090")
    assert done.returncode == 0, done.stderr
    facts = basement.facts()
    blades = [h for h in facts if h.startswith("lab-rtx3090-")]
    assert len(blades) == 4 and all(facts[h]["nvidia"]["gpus"][0]["locked"] == {"sm": "210,1695"} for h in blades)
    assert "locked_sm=210,1695" in basement.node_file(BLADE, CONF).read_text()

    refused = adhoc(basement, "clocks", "--mem", "9751", "--sm", "1500", "-l", "rtx3090")
    assert refused.returncode == 2 and "use `provision clocks --locked --sm 210,1500`" in refused.stderr

    code, back = basement.apply()
    assert code == 0, back
    assert items(back, V100, "gpu-power-limit")["GPU1"]["status"] == "changed"
    assert [g["power_limit"] for g in basement.gpus(V100)] == [200.0] * 4
    assert "locked_sm" not in basement.node_file(BLADE, CONF).read_text()


def layout_failures(result: dict, host: str) -> list[str]:
    """The gpu-layout task's messages (its items all target "host") when it failed."""
    return [message for h in result["hosts"] if h["host"] == host for t in h["tasks"]
            if t["name"] == "gpu-layout" and t["status"] == "failed"
            for message in [t["message"], *(i["message"] for i in t["items"] if i["status"] == "failed")]]


def test_a_gone_riser_card_moves_no_override_and_fails_the_host_until_it_is_back(basement):
    before = [g["uuid"] for g in basement.gpus(RISERS)]
    basement.lab("fault", RISERS, "gpu-gone", "--gpu", "3")  # the hot card's riser: the others are renumbered
    try:
        gpus = basement.gpus(RISERS)
        assert [g["uuid"] for g in gpus] == before[:3] + before[4:] and gpus[3]["power_limit"] == 400.0
        for args in (("--check",), ()):
            code, result = basement.apply("--limit", RISERS, *args)
            assert code & 1 and not code & 2, result  # failed, not bad input
            held = items(result, RISERS, "gpu-power-limit")["GPU3"]
            assert held["status"] == "failed" and f"not moved onto {before[4]}" in held["message"]
            assert any(f"GPU3 {before[3]}" in m and "is gone" in m for m in layout_failures(result, RISERS))
        assert [g["power_limit"] for g in basement.gpus(RISERS)] == [400.0] * 6  # no card took the 300 W cap
        conf = basement.node_file(RISERS, CONF).read_text()
        assert cards(conf).count(" index=3 ") == 1 and f"gpu={before[3]} " in conf and "was_index=3" in conf
    finally:
        basement.lab("fault", RISERS, "clear")
    code, result = basement.apply("--limit", RISERS)
    assert code == 0, result
    basement.lab("reboot", RISERS)  # a new riser: the next boot's kernel log is clean (test_verify_drills.py reads it)
    assert basement.apply("--limit", RISERS)[0] == 0
    assert result["hosts"][0]["counts"]["changed"] == 1  # the boot file gets the card's line back; nothing else
    assert [g["power_limit"] for g in basement.gpus(RISERS)] == [400.0, 400.0, 400.0, 300.0, 400.0, 400.0, 400.0]


def test_a_v100_off_the_bus_fails_every_run_until_it_is_back_and_a_removal_until_accepted(basement):
    basement.lab("fault", V100, "gpu-off-bus", "--gpu", "2")
    for _ in range(2):
        code, result = basement.apply("--limit", V100)
        assert code & 1, result
        assert any("Unable to determine the device handle" in m for m in layout_failures(result, V100))
    basement.lab("reboot", V100)  # it comes back; the boot unit re-applies the settings
    code, result = basement.apply("--limit", V100)
    # Nothing but the boot file, which kept GPU2's line by UUID only while it was off the bus: its index is back.
    assert code == 0 and [t["name"] for t in result["hosts"][0]["tasks"] if t["status"] != "ok" and
                          t["status"] != "skipped"] == ["gpu-boot-conf"], result

    basement.lab("fault", V100, "gpu-gone", "--gpu", "2")  # the card is pulled for repair
    try:
        code, result = basement.apply("--limit", V100)
        assert code & 1 and any("is gone" in m for m in layout_failures(result, V100)), result
        code, result = basement.apply("--limit", V100, "--accept-gpu-changes")
        assert code == 0, result
        code, result = basement.apply("--limit", V100)
        assert code == 0 and result["hosts"][0]["counts"]["changed"] == 0, result
    finally:
        basement.lab("fault", V100, "clear")
    code, result = basement.apply("--limit", V100)  # back from repair: a new GPU until accepted
    assert code & 1 and any("new GPU2" in m for m in layout_failures(result, V100)), result
    code, result = basement.apply("--limit", V100, "--accept-gpu-changes")
    assert code == 0, result
    basement.lab("reboot", V100)  # the card pulled and put back: the kernel log of the next boot is clean
    code, result = basement.apply("--limit", V100)
    assert code == 0 and result["hosts"][0]["counts"]["changed"] == 0, result

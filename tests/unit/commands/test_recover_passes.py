"""recover's passes (commands/recover.py Ladder.run): verify, each node's next step, the step, verify again; the
steps themselves stood in for (the lab test takes them for real), the card record real."""

from __future__ import annotations

from pathlib import Path

from builders.facts import facts
from builders.gpus import gpus
from builders.hosts import host

from provision.commands import recover
from provision.commands.recovery import cards
from provision.commands.recovery.ladder import Step
from provision.commands.run import Target
from provision.core import pci
from provision.core.checks import RESET
from provision.core.run import RunOptions
from provision.core.runlog import RunLog
from provision.core.connection import SSHOptions
from provision.verify import FAIL, PASS, UNREACHABLE, Verdict
from provision.verify.model import Failure


def reset_required(name: str, bus_id: str) -> Verdict:
    return Verdict(name, FAIL, failures=[Failure("no_gpu_asks_for_recovery", "no recovery action",
                                                 "GPU Recovery Action: Reset", about=[bus_id], remedy=RESET)])


class Scripted(recover.Ladder):
    """The ladder over verdicts given per pass; the steps recorded, done as `outcomes` says."""

    def __init__(self, log: Path, verdicts: dict[str, list[Verdict]], outcomes: dict[str, bool] | None = None,
                 **told):
        names = list(verdicts)
        target = Target("inventory.yaml", [host(n) for n in names], [host(n) for n in names])
        super().__init__(target, [], RunOptions(), SSHOptions(), RunLog(log, "recover", "inventory.yaml"),
                         recover.Options(**told))
        self.verdicts, self.outcomes, self.done = verdicts, outcomes or {}, []
        self.facts = facts(gpus=gpus(2, "H100"))

    def look(self, hosts):
        return {h.name: (self.facts, self.verdicts[h.name].pop(0)) for h in hosts}

    def slurm_node(self, host):
        return None

    def resume(self, host):
        return ""

    def serials(self, host, facts):
        return {pci.slot(g.bus_id): f"SN-{g.index}" for g in facts.nvidia.gpus}

    def do(self, host, facts, step: Step):
        self.done.append((host.name, step.action))
        if step.action == "service":
            return super().do(host, facts, step)
        ok = self.outcomes.get(host.name, True)
        return ("done" if ok else "nvidia-smi -r: In use by another client"), ok, recover.STEP_FAILED


def test_a_reset_class_fault_is_reset_and_the_node_recovered(tmp_path) -> None:
    bus = facts(gpus=gpus(2, "H100")).nvidia.gpus[0].bus_id
    ladder = Scripted(tmp_path / "runs.jsonl", {"gpu-1": [reset_required("gpu-1", bus), Verdict("gpu-1", PASS)]})
    [gpu1] = ladder.run()
    assert ladder.done == [("gpu-1", "reset")]
    assert (gpu1.status, [s.action for s in gpu1.steps]) == (recover.RECOVERED, ["reset"])
    assert '"event": "step"' in (tmp_path / "runs.jsonl").read_text()  # the step, with why, in the run log


def test_a_fault_that_survives_the_reset_and_the_reboot_is_a_card_to_replace(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    bus = pci.slot(facts(gpus=gpus(2, "H100")).nvidia.gpus[1].bus_id)  # as the health checks name a GPU
    ladder = Scripted(tmp_path / "runs.jsonl", {"gpu-1": [reset_required("gpu-1", bus) for _ in range(3)]})
    [gpu1] = ladder.run()
    assert [action for _, action in ladder.done] == ["reset", "reboot", "service"]
    assert gpu1.status == recover.NEEDS_SERVICE
    assert gpu1.message.startswith(f"replace the card in slot {bus} of gpu-1 (serial SN-1)")
    assert cards.read("SN-1").times == 1


def test_check_plans_and_touches_nothing(tmp_path) -> None:
    ladder = Scripted(tmp_path / "runs.jsonl", {"gpu-1": [reset_required("gpu-1", "00000000:18:00.0")], "gpu-2": [Verdict("gpu-2", PASS)]},
                      check=True)
    planned, fine = ladder.run()
    assert ladder.done == []
    assert (planned.status, planned.plan) == (recover.PLANNED, "reset: no_gpu_asks_for_recovery: GPU Recovery "
                                                               "Action: Reset (remedy reset)")
    assert fine.status == recover.PASSES


def test_one_nodes_failed_step_holds_no_other(tmp_path) -> None:
    ladder = Scripted(tmp_path / "runs.jsonl", {"gpu-1": [reset_required("gpu-1", "00000000:18:00.0")],
                       "gpu-2": [reset_required("gpu-2", "00000000:18:00.0"), Verdict("gpu-2", PASS)],
                       "gpu-3": [Verdict("gpu-3", UNREACHABLE, "cannot connect")]}, outcomes={"gpu-1": False})
    held, fine, lost = ladder.run()
    assert (held.status, held.message) == (recover.STEP_FAILED, "nvidia-smi -r: In use by another client")
    assert fine.status == recover.RECOVERED and lost.status == recover.UNREACHED


def test_a_card_is_named_by_its_uuid_where_no_serial_was_read() -> None:
    node = facts(gpus=gpus(2, "H100"))
    gpu = node.nvidia.gpus[1]
    card = recover.card_of("gpu-1", gpu.bus_id.replace("00000000", "0000"), node, {}, "no_gpu_is_lost: gone")
    assert (card.serial, card.uuid) == (gpu.uuid, gpu.uuid)

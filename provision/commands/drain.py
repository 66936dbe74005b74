"""verify --drain / --resume: Slurm carries what verify found. A failed compute node is drained with a reason
that starts with DRAIN_REASON_PREFIX; --resume returns only nodes drained that way that now pass, never a drain
someone else set (a repair, a maintenance window)."""

from __future__ import annotations

from dataclasses import dataclass

from provision.capabilities.slurm.facts import DRAIN_REASON_PREFIX
from provision.core.errors import ProvisionError
from provision.verify import FAIL, PASS, Verdict

REASON_CHARS = 200  # slurmctld keeps the reason; sinfo -R shows it on one line


@dataclass
class SlurmAction:
    host: str
    node: str  # the Slurm NodeName
    action: str  # "drain" or "resume"
    reason: str = ""

    def argv(self) -> list[str]:
        if self.action == "drain":
            return ["scontrol", "update", f"NodeName={self.node}", "State=DRAIN", f"Reason={self.reason}"]
        return ["scontrol", "update", f"NodeName={self.node}", "State=RESUME"]


def drain_reason(verdict: Verdict) -> str:
    """The first cause found (one cause, one finding: a lost GPU's consequences are not "more")."""
    causes = verdict.findings
    first = causes[0].failure
    more = f" (+{len(causes) - 1} more)" if len(causes) > 1 else ""
    text = f"{DRAIN_REASON_PREFIX} {first.check}: {first.found}{more}"
    return " ".join(text.split())[:REASON_CHARS]


def slurm_actions(states, verdicts: dict[str, Verdict], drain: bool, resume: bool) -> list[SlurmAction]:
    """What to ask slurmctld for each verified compute node: drain the failed ones not already out of service,
    resume the passing ones that verify itself drained."""
    actions = []
    for state in states:
        slurm, verdict = state.host.settings.slurm, verdicts.get(state.host.name)
        node = state.facts.slurm_node if state.facts else None
        if slurm is None or slurm.role_of(state.host.name) == "controller" or not verdict or not node or not node.name:
            continue
        ours = node.out_of_service and node.reason.startswith(DRAIN_REASON_PREFIX)
        if drain and verdict.status == FAIL and not node.out_of_service:
            actions.append(SlurmAction(state.host.name, node.name, "drain", drain_reason(verdict)))
        elif resume and verdict.status == PASS and ours:
            actions.append(SlurmAction(state.host.name, node.name, "resume"))
    return actions


def tell_slurm(actions: list[SlurmAction], states) -> list[dict[str, str]]:
    """Run each drain/resume on its own node (scontrol, privileged); what happened, per node."""
    conns = {s.host.name: s.conn for s in states}
    done = []
    for action in actions:
        try:
            outcome = conns[action.host].run(action.argv(), sudo=True, timeout=60)
            done_word = {"drain": "drained", "resume": "resumed"}[action.action]
            said = (f"{done_word} in Slurm" + (f" ({action.reason})" if action.reason else "")
                    if outcome.ok else f"could not {action.action}: {outcome.output.strip()}")
        except ProvisionError as exc:
            said = f"could not {action.action}: {exc}"
        done.append({"host": action.host, "node": action.node, "action": action.action, "said": said})
    return done

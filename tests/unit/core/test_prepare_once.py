"""A change's preparing commands (Change.prepare: apt-get update before an install) run once per host per run,
however many changes declare them and in however many batches, ahead of the first change that needs them; a
failure fails exactly the changes that declared it (they run nothing), and the others run; --check shows each
once."""

from __future__ import annotations

from provision.core.apply import apply_changes
from provision.core.applyhost import HostApplier
from provision.core.connection import LocalConnection
from provision.core.hoststate import HostState
from provision.core.plan import CHANGED, FAILED, Change, Plan, Task
from provision.core.results import TaskResult
from provision.core.runoptions import RunOptions
from provision.core.stopping import Stop

from builders.facts import facts
from builders.hosts import host


def logging(log, word: str) -> list[str]:
    return ["sh", "-c", f"echo {word} >> {log}"]


def test_a_preparing_command_runs_once_right_before_the_first_change_that_needs_it(tmp_path):
    """After the changes before it: an apt source one of them writes is in the lists it fetches."""
    log = tmp_path / "log"
    update = logging(log, "update")
    conn = LocalConnection("here")
    ran = apply_changes(conn, [
        Change("a", "it", "", "", commands=[logging(log, "a")]),
        Change("b", "it", "", "", commands=[logging(log, "b")], prepare=[update]),
        Change("c", "it", "", "", commands=[logging(log, "c")], prepare=[update]),
        Change("d", "it", "", "", commands=[logging(log, "d")], prepare=[list(update)]),  # the same words: the same
    ])
    assert conn.commands_run == 1 and ran.errors == [None] * 4
    assert log.read_text().split() == ["a", "update", "b", "c", "d"]
    assert ran.prepared == [tuple(update)]


def test_a_preparing_command_that_fails_fails_the_changes_that_need_it_and_no_other(tmp_path):
    log = tmp_path / "log"
    broken = ["sh", "-c", "echo 'E: The repository is not signed.'; exit 100"]
    fine = logging(log, "fine")
    ran = apply_changes(LocalConnection("here"), [
        Change("install", "it", "", "", commands=[logging(log, "install")], prepare=[broken]),
        Change("other", "it", "", "", commands=[logging(log, "other")]),
        Change("both", "it", "", "", commands=[logging(log, "both")], prepare=[fine, broken]),
        Change("fine only", "it", "", "", commands=[logging(log, "fine-only")], prepare=[fine]),
    ])
    said = "`sh -c echo 'E: The repository is not signed.'; exit 100` exited 100: E: The repository is not signed."
    assert ran.errors == [said, None, said, None]
    assert log.read_text().split() == ["other", "fine", "fine-only"]  # what needed the broken one ran nothing
    assert ran.prepared == [tuple(fine)]  # only a success counts as done


def test_a_preparing_command_run_earlier_in_the_run_is_not_run_again(tmp_path):
    log = tmp_path / "log"
    update = logging(log, "update")
    ran = apply_changes(LocalConnection("here"), [Change("b", "it", "", "", commands=[logging(log, "b")],
                                                         prepare=[update])], prepared={tuple(update)})
    assert ran.errors == [None] and ran.prepared == [] and log.read_text().split() == ["b"]


class Installs(Task):
    """A task whose one change needs `prepare` first; it alters anything, so each is a batch of its own."""

    def __init__(self, name: str, log, prepare: list[list[str]]):
        super().__init__(name=name)
        self.log, self.prepare = log, prepare

    def plan_where_set(self, host, facts) -> Plan:
        return Plan(changes=[Change("host", "packages", "old", "new", commands=[logging(self.log, self.name)],
                                    prepare=self.prepare)])


class Reader:
    """The read after each batch: the host as it was (these changes alter no fact)."""

    def read_after(self, state, altered, last) -> None:
        return None


def applied(tasks: list[Task], check: bool = False) -> list[TaskResult]:
    results: list[TaskResult] = []
    state = HostState(host(), conn=LocalConnection("here"), facts=facts())
    applier = HostApplier(tasks, RunOptions(check=check), Stop(lambda words: None), Reader(),  # type: ignore[arg-type]
                          lambda state, result: results.append(result), lambda state, task: None)
    applier.apply_host(state)
    return results


def test_four_pinned_tasks_in_four_batches_run_one_update(tmp_path):
    """A driver move: the driver, fabric manager, toolkit and DCGM each plan from what the one before changes."""
    log = tmp_path / "log"
    update = logging(log, "update")
    names = ["nvidia-driver", "fabric-manager", "container-toolkit", "dcgm"]
    results = applied([Installs(name, log, [update]) for name in names])
    assert [r.status for r in results] == [CHANGED] * 4
    assert log.read_text().split() == ["update", *names]


def test_a_failed_update_is_tried_again_by_the_next_batch_that_needs_it(tmp_path):
    log = tmp_path / "log"
    flaky = ["sh", "-c", f"echo update >> {log}; test -e {tmp_path}/second || {{ touch {tmp_path}/second; exit 1; }}"]
    results = applied([Installs("first", log, [flaky]), Installs("second", log, [flaky]),
                       Installs("third", log, [flaky])])
    assert [r.status for r in results] == [FAILED, CHANGED, CHANGED]
    assert log.read_text().split() == ["update", "update", "second", "third"]


def test_check_shows_a_preparing_command_once_and_runs_nothing(tmp_path):
    log = tmp_path / "log"
    update = logging(log, "update")
    results = applied([Installs(name, log, [update]) for name in ("nvidia-driver", "fabric-manager", "dcgm")],
                      check=True)
    shown = [(r.name, item.after, item.message) for r in results for item in r.items if item.what == "preparing command"]
    assert shown == [("nvidia-driver", " ".join(update), "would run once, before the changes that need it")]
    assert [r.status for r in results] == [CHANGED] * 3 and not log.exists()

"""One node's active run: the sh that runs on it (refuse when GPU processes run; the sampler in the background;
the load; the sampler stopped; everything printed in sections) and what comes back, read into an ActiveRun.

The load is provision's program (load_program.py, sent on stdin to the node's Python) or the inventory's
provision_active.load_command. Both get `--seconds N` and print one JSON line. Or `dcgmi diag -r N -j` (provision_active.dcgm_diag):
its level sets its length, and what it prints is dcgm.py's to read.

Stopping: the first Ctrl-C or SIGTERM of verify runs stop_script on the node (a command of its own beside the
run), which sends the run's shell SIGTERM: it stops the load (its own process group) and the sampler, and prints
what was sampled so far, marked stopped. The node side also ends by itself when its controller is gone (provision
killed, the connection cut): a watchdog writes an empty line to the run's stdout each second, which fails once
nothing reads it (sshd gone, or the channel closed), and hangs the run up. Every end (done, stopped, hung up)
stops the load and the sampler and removes the temporary directory: an interrupted run leaves nothing behind.
The all-reduce (the torchrun wrapper) runs on the node the same way (allreduce_script), so it stops with a stop.

The watchdog also sends the samples as they are taken, so a node lost mid-load (its connection closed or silent)
has sent what it sampled until then, to be judged (commands/active.py: lost_verdicts).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.capabilities.active import dcgm, sampler
from provision.capabilities.active.judge import Target
from provision.capabilities.active.sampler import Sample
from provision.capabilities.gpu import smi

if TYPE_CHECKING:  # types only
    from provision.capabilities.health.kernlog import KernelEvent
    from provision.core.checks import Finding

PROGRAM = Path(__file__).with_name("load_program.py")
NOT_APPLICABLE = 3  # the load program's exit: nothing to load here (no torch, no CUDA)
MARK = "@@provision-active "  # section lines: busy, unreadable, samples, load RC, stderr
TEMP_PREFIX = "provision-active."  # the run's directory under $TMPDIR (/tmp): its token file names the run
STOP_GRACE_S = 5  # a load told to stop has this long to print what it did before it is killed


@dataclass
class ActiveRun:
    """What the active run found on one node (the capabilities' checks judge it: active/checks.py)."""

    seconds: float
    targets: list[Target] = field(default_factory=list)  # the GPUs as set before the run
    power_budget: float | None = None  # provision_active.power_budget_watts
    refused: str = ""  # why the node was not loaded: its GPUs or Slurm were busy, or the run was stopped first
    stopped: str = ""  # the signal that stopped the load before its end ("SIGINT"): what was sampled is judged
    error: str = ""  # the run could not be made (no nvidia-smi answer, the connection, a timeout)
    lost: str = ""  # the node was lost mid-load (the connection: why): what it sampled until then is judged
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    load_rc: int | None = None
    load: dict[str, Any] = field(default_factory=dict)  # the load's JSON line
    load_stderr: str = ""
    during: list[KernelEvent] = field(default_factory=list)  # kernel events logged during the load (during.py)
    grown: list[Finding] = field(default_factory=list)  # findings: GPU error counters that grew during it (during.py)
    last_good: dict[str, float] = field(default_factory=dict)  # UUID -> TFLOP/s of the last good run (history.py)
    history_key: str = ""  # the machine its last good run is kept for (history.key: its name and machine-id)
    fabric: list[Finding] = field(default_factory=list)  # findings of the port tests filed under this node (fabric.py)
    fabric_notes: list[str] = field(default_factory=list)  # ports not tested, and why
    ports: dict[str, float] = field(default_factory=dict)  # port -> Mb/s iperf3 measured it carry (the slower way)
    allreduce: dict[str, float] = field(default_factory=dict)  # "within NODE" / "across GROUP" -> bus bandwidth GB/s
    dcgm: dcgm.Diag | None = None  # what dcgmi diag reported, where it was the load (provision_active.dcgm_diag)


def python_for(settings_python: str | None, torchrun: str | None) -> str:
    """The node's Python with torch: the setting; else the python3 beside an absolute torchrun; else python3."""
    if settings_python:
        return settings_python
    if torchrun and torchrun.startswith("/"):
        return str(Path(torchrun).with_name("python3"))
    return "python3"


def load_argv(load_command: list[str] | None, python: str, seconds: float, dcgm_diag: int | None = None
              ) -> tuple[list[str], str | None]:
    """(the load's argv, its stdin): dcgmi diag at the level asked, the inventory's command, or provision's
    program on the Python's stdin."""
    if dcgm_diag:
        return dcgm.argv(dcgm_diag), None
    if load_command:
        return [*load_command, "--seconds", f"{seconds:g}"], None
    return [python, "-", "--seconds", f"{seconds:g}"], PROGRAM.read_text()


def load_seconds(seconds: float, dcgm_diag: int | None = None) -> float:
    """How long the load may run: --duration, or as long as dcgmi's level takes at most (it sets its own)."""
    return float(dcgm.LIMIT_S[dcgm_diag]) if dcgm_diag else seconds


def node_script(load: list[str], interval_ms: int, token: str = "") -> str:
    """The sh run on the node. The compute-apps query first: any process on a GPU and the node is not touched.
    token: this run's name on the node (stop_script finds the run by it)."""
    return "\n".join([
        "set -u",
        # a write to a controller that is gone fails (EPIPE) instead of killing the shell before it cleans up
        "trap '' PIPE",
        f"apps=$(nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid --format=csv,noheader </dev/null 2>&1) "
        f"|| {{ echo '{MARK}unreadable'; printf '%s\\n' \"$apps\"; exit 0; }}",
        f"[ -z \"$apps\" ] || {{ echo '{MARK}busy'; printf '%s\\n' \"$apps\"; exit 0; }}",
        f"d=$(mktemp -d \"${{TMPDIR:-/tmp}}/{TEMP_PREFIX}XXXXXX\") || exit 90",
        "s='' l='' w='' stop='' rc=''",
        *_stopping(token),
        "exec 3<&0",  # the load's stdin (provision's program): a job in the background would get /dev/null
        smi.query_gpu_snippet(sampler.SAMPLE_FIELDS) + " </dev/null",
        f"nvidia-smi --query-gpu=\"$f\" {smi.QUERY_FORMAT} -lms {int(interval_ms)} </dev/null >\"$d/samples\" 2>&1 &",
        "s=$!",
        # its own process group where setsid is there (util-linux): a load's children stop with it
        f"$g {shlex.join(load)} <&3 3<&- >\"$d/load\" 2>\"$d/err\" &",
        "l=$!",
        "exec 3<&-",
        # the samples as they come (a node lost mid-load has sent what it sampled until then), and the watchdog
        f"echo '{MARK}samples'",
        _watchdog("samples"),
        "w=$!",
        "[ -z \"$stop\" ] || halt",  # a stop that came before $l was known
        "wait \"$l\"; rc=$?",
        "[ -z \"$stop\" ] || ended",
        "l=''",
        "[ -n \"$stop\" ] || sleep 1",  # the ramp down, sampled (not after a stop: stopped means now)
        "kill \"$s\" 2>/dev/null; wait \"$s\" 2>/dev/null; s=''",
        WATCHDOG_DONE,  # the last samples sent
        f"[ -z \"$stop\" ] || echo \"{MARK}stopped $stop\"",
        f"echo \"{MARK}load $rc\"; cat \"$d/load\"",
        f"echo '{MARK}stderr'; tail -c 4000 \"$d/err\"",
    ])


# Ends the watchdog: it sends what is left of the file it streams, then exits (halt leaves it running for that).
# Waited for until it is gone: a stop sent again (stop_script) interrupts a wait, and its last lines would follow.
WATCHDOG_DONE = "rm -f \"$d/live\"; while [ -n \"$w\" ] && kill -0 \"$w\" 2>/dev/null; do wait \"$w\"; done; w=''"


def _watchdog(stream: str = "") -> str:
    """The watchdog, in the background while the file $d/live is there: each second the new whole lines of the
    file $d/STREAM (a node lost mid-run has sent them), then an empty line (read as nothing); a write that fails
    means no one reads the run any more (sshd gone with provision, the channel closed): it hangs the run up, with
    USR1, not HUP: a shell started with HUP ignored (under nohup) cannot trap HUP. Once live is gone it sends
    what is left and ends (WATCHDOG_DONE)."""
    send = (f"m=$(($(wc -l <\"$d/{stream}\" 2>/dev/null || echo \"$n\"))); "
            f"[ \"$m\" -le \"$n\" ] || sed -n \"$((n + 1)),${{m}}p\" \"$d/{stream}\"; n=$m; ") if stream else ""
    return (": >\"$d/live\"; ( n=0; while :; do [ -e \"$d/live\" ] && going=1 || going=''; " + send
            + "[ -n \"$going\" ] || exit 0; printf '\\n' 2>/dev/null || { kill -USR1 $$; exit 0; }; "
            "sleep 1 >/dev/null; done ) &")


def allreduce_script(check: str, argv: list[str], env: dict[str, str], token: str) -> str:
    """The all-reduce (argv: the torchrun wrapper and its program) on a node, stopped as the load is: its own
    process group, named by token for stop_script, hung up by the watchdog once its controller is gone (no
    torchrun left to wait out its rendezvous); check: sh that exits 3, saying why, where it cannot run. Prints
    its output, after the stopped mark where it was stopped."""
    return "\n".join([
        "set -u",
        "trap '' PIPE",
        check,
        f"d=$(mktemp -d \"${{TMPDIR:-/tmp}}/{TEMP_PREFIX}XXXXXX\") || exit 90",
        "s='' l='' w='' stop='' rc=''",
        *_stopping(token),
        f"$g env {shlex.join([f'{k}={v}' for k, v in env.items()])} {shlex.join(argv)} </dev/null >\"$d/out\" 2>&1 &",
        "l=$!",
        _watchdog(),
        "w=$!",
        "[ -z \"$stop\" ] || halt",
        "wait \"$l\"; rc=$?",
        "[ -z \"$stop\" ] || ended",
        "l=''",
        WATCHDOG_DONE,
        f"[ -z \"$stop\" ] || echo \"{MARK}stopped $stop\"",
        "cat \"$d/out\"",
        "exit \"$rc\"",
    ])


def _stopping(token: str) -> list[str]:
    """The node script's traps. halt: TERM to the load's group (or the load) and the sampler (the watchdog ends
    by itself: WATCHDOG_DONE, or the directory gone); ended: wait STOP_GRACE_S for the load to go (it may print what it did), then KILL. INT and TERM: stop and
    report; HUP, or USR1 from the watchdog (no controller): stop and exit at once; on every exit the directory goes."""
    return [
        "command -v setsid >/dev/null 2>&1 && g=setsid || g=''",
        "halt() { [ -z \"$l\" ] || kill -TERM -\"$l\" 2>/dev/null || kill -TERM \"$l\" 2>/dev/null; "
        "for p in $s; do kill -TERM \"$p\" 2>/dev/null; done; }",
        f"ended() {{ n=0; while [ -n \"$l\" ] && kill -0 \"$l\" 2>/dev/null && [ $n -lt {STOP_GRACE_S * 10} ]; "
        "do sleep 0.1; n=$((n + 1)); done; [ -z \"$l\" ] || kill -KILL -\"$l\" 2>/dev/null || "
        "kill -KILL \"$l\" 2>/dev/null; [ -z \"$l\" ] || { wait \"$l\"; rc=$?; }; }",
        "trap 'halt; ended; rm -rf \"$d\"' EXIT",
        "trap 'stop=SIGINT; halt' INT",
        "trap 'stop=SIGTERM; halt' TERM",
        "trap 'stop=SIGHUP; halt; exit 129' HUP USR1",
        f"printf '%s\\n' {shlex.quote(token)} >\"$d/token\"; echo $$ >\"$d/pid\"",
    ]


def stop_script(token: str, signal_name: str = "TERM") -> str:
    """Stops the run named token on this node: its shell gets SIGTERM (node_script's trap stops the load and the
    sampler and reports). Prints how many runs it reached."""
    return "\n".join([
        "n=0",
        f"for t in \"${{TMPDIR:-/tmp}}\"/{TEMP_PREFIX}*/token; do",
        f"  [ -f \"$t\" ] && [ \"$(cat \"$t\")\" = {shlex.quote(token)} ] || continue",
        f"  kill -{signal_name} \"$(cat \"${{t%/token}}/pid\")\" 2>/dev/null && n=$((n + 1))",
        "done",
        "echo \"$n\"",
    ])


def parse(text: str, seconds: float, targets: list[Target], dcgm_diag: int | None = None) -> ActiveRun:
    """The node script's output into an ActiveRun; dcgm_diag: the load was dcgmi diag at that level."""
    run = ActiveRun(seconds, targets)
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(MARK):
            words = line[len(MARK):].split()
            current = words[0] if words else ""
            sections[current] = []
            if current == "load" and len(words) > 1 and words[1].lstrip("-").isdigit():
                run.load_rc = int(words[1])
        elif current is not None:
            sections[current].append(line)
    if "stopped" in sections:
        run.stopped = words_after(text, "stopped") or "a signal"
    if "busy" in sections:
        run.refused = "processes run on its GPUs: " + "; ".join(sections["busy"][:4])
    elif "unreadable" in sections:
        run.error = "nvidia-smi could not list the GPUs' processes: " + " ".join(sections["unreadable"][-2:])
    elif "load" not in sections:  # the samples come as they are taken: the load's section says it reported
        sampled = set(sections.get("samples", []))  # the watchdog's empty lines say nothing, nor the samples
        said = [line for line in text.splitlines() if line.strip() and line not in sampled]
        run.error = "the run ended before it reported: " + (" ".join(said[-2:]) or "no output")
    run.samples = sampler.by_gpu(sampler.parse("\n".join(sections.get("samples", []))))
    run.load_stderr = "\n".join(sections.get("stderr", []))
    if dcgm_diag and "load" in sections:  # dcgmi's JSON spans lines; its length is what was sampled
        run.dcgm = dcgm.read(dcgm_diag, "\n".join(sections["load"]), run.load_rc, run.load_stderr)
        run.seconds = round(max((s.t for rows in run.samples.values() for s in rows), default=seconds), 1)
    else:
        run.load = _json_line(sections.get("load", []))
    if run.stopped or "load" not in sections:  # judged on what was sampled: its length is the run's
        run.seconds = round(max((s.t for rows in run.samples.values() for s in rows), default=0.0), 1)
    return run


def words_after(text: str, section: str) -> str:
    """What follows a section's mark on its line ("SIGINT" for the stopped mark)."""
    head = f"{MARK}{section} "
    return next((line[len(head):].strip() for line in text.splitlines() if line.startswith(head)), "")


def _json_line(lines: list[str]) -> dict[str, Any]:
    for line in reversed(lines):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}

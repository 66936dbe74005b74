"""Human output: a line per host, the changes and failures under it, then the totals. Fits a terminal at
16+ hosts; -v shows every task and target; --json is for scripts."""

from __future__ import annotations

import functools
import re
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from provision.capabilities.capability import HEADING, PROBLEM, WARNING, FactLine
from provision.capabilities.host import HostFacts
from provision.core.results import NOT_STARTED, UNREACHABLE, HostResult, signal_name
from provision.core.plan import CHANGED, FAILED, OK, SKIPPED

if TYPE_CHECKING:  # types only
    from provision.verify import Verdict

PENDING = "pending"  # a host whose installed driver waits for a reboot: a state of its own, not a failure
COLORS = {OK: "green", CHANGED: "yellow", FAILED: "red", SKIPPED: "cyan", UNREACHABLE: "red", NOT_STARTED: "magenta",
          PENDING: "yellow"}


def status_label(status: str, check: bool) -> str:
    return "would change" if check and status == CHANGED else status


def status_word(status: str, check: bool) -> str:
    return click.style(f"{status_label(status, check):<12}", fg=COLORS.get(status))


def print_results(results: list[HostResult], check: bool, show_diff: bool, verbose: bool = False,
                  stopped_by: int | None = None) -> None:
    """One line per host; under it, a line per change, failure and problem (-v: every task and target); then
    the totals and the hosts that need attention. The status column comes first, so long names and paths
    never push it over. stopped_by: the signal that stopped the run, said first."""
    width = min(max((len(r.host) for r in results), default=4), HOST_COLUMN)
    if stopped_by:
        click.secho(f"Stopped by {signal_name(stopped_by)}: the changes in flight finished; the hosts and tasks "
                    "below marked 'not started' were not touched. Run the same command again to converge them.",
                    fg="magenta", bold=True)
    columns = shutil.get_terminal_size((100, 24)).columns
    for result in results:
        click.echo(host_line(result, check, width))
        for status, text in detail_lines(result, check, show_diff, verbose):
            if status is None:  # a diff line: as it is
                click.echo(text)
            else:  # wrapped under its text, as verify's findings are
                plain = f"    {status_label(status, check):<12} "
                _echo_wrapped(plain, f"    {status_word(status, check)} ", text, len(plain), commands=True,
                              columns=columns)
    print_summary(results, check, width)


HOST_COLUMN = 32  # longer host names push their own line over, never the others'


def host_line(result: HostResult, check: bool, width: int) -> str:
    """The host in its status's colour, then its task counts (the same words as the run log and --json)."""
    name = click.style(f"{result.host:<{width}}", fg=COLORS.get(result.status), bold=True)
    if result.status in (UNREACHABLE, NOT_STARTED) and not result.tasks:
        return f"{name}  {click.style(result.status.upper(), fg=COLORS[result.status])}  {result.message}"
    c = result.counts()
    commands = f"{result.commands} command{'' if result.commands == 1 else 's'}"
    line = (f"{name}  ok={c[OK]} {'would change' if check else 'changed'}={c[CHANGED]} failed={c[FAILED]} "
            f"skipped={c[SKIPPED]}" + (f" not started={c[NOT_STARTED]}" if c[NOT_STARTED] else "")
            + f"  ({commands}, {result.seconds:.2f} s)")
    if result.status == UNREACHABLE:  # lost in the middle: what it did before is under it
        line += f"  {click.style('UNREACHABLE', fg='red')}"
    return line


def detail_lines(result: HostResult, check: bool, show_diff: bool, verbose: bool) -> list[tuple[str | None, str]]:
    """The lines under a host's line, as (status, text); (None, line) for a diff line, shown as it is."""
    if result.status in (UNREACHABLE, NOT_STARTED) and not result.tasks:
        return []
    lines: list[tuple[str | None, str]] = [
        (result.status if result.status == UNREACHABLE else FAILED, result.message)] if result.message else []
    if result.reboot_pending:
        lines.append((PENDING, f"reboot: {'; '.join(result.reboot_pending)} (provision apply --reboot reboots it)"))
    for task in result.tasks:
        shown = [item for item in task.items if verbose or item.status in (CHANGED, FAILED)]
        if task.message and (verbose or task.status in (FAILED, NOT_STARTED)):  # why it failed, skipped, ...
            lines.append((task.status, f"{task.name}: {task.message}"))
        for item in shown:
            lines.append((item.status, f"{task.name} {item.target}: {_detail(item)}"))
            if show_diff and item.diff:
                lines += [(None, "        " + _color_diff(line)) for line in item.diff.rstrip("\n").splitlines()]
    return lines


def _detail(item) -> str:
    detail = f"{item.what}: {item.before} -> {item.after}" if item.status == CHANGED or item.before \
        else f"{item.what}: {item.after}" if item.after else item.what
    if item.message and item.message != "would change":
        detail += f" ({item.message})" if item.after or item.before else f": {item.message}"
    return detail


def _color_diff(line: str) -> str:
    if line.startswith("+") and not line.startswith("+++"):
        return click.style(line, fg="green")
    if line.startswith("-") and not line.startswith("---"):
        return click.style(line, fg="red")
    return line


def print_summary(results: list[HostResult], check: bool, width: int) -> None:
    """The totals line, then each host that needs attention and why (failed, unreachable; drift under --check)."""
    counts = {status: sum(1 for r in results if r.status == status)
              for status in (OK, CHANGED, FAILED, UNREACHABLE, NOT_STARTED)}
    words = {OK: "ok", CHANGED: "would change" if check else "changed", FAILED: "failed", UNREACHABLE: "unreachable",
             NOT_STARTED: "not started"}
    totals = ", ".join(f"{n} {words[status]}" for status, n in counts.items() if n)
    pending = sum(1 for r in results if r.reboot_pending and r.status != UNREACHABLE)
    totals += f", {pending} reboot pending" if pending else ""
    mode = "  (check mode: nothing was changed)" if check else ""
    click.echo(f"\n{len(results)} host{'' if len(results) == 1 else 's'}: {totals or 'none'}{mode}")
    attention = [(r, why) for r in results for why in [_why_attention(r, check)] if why]
    if attention:
        click.echo(click.style("Needs attention:", bold=True))
        for result, why in attention:
            click.echo(f"  {result.host:<{width}}  {why}")


def _why_attention(result: HostResult, check: bool) -> str:
    if result.status == UNREACHABLE:
        return f"unreachable: {_short(result.message)}"
    if result.status == NOT_STARTED:
        return _short(result.message)
    if result.status == FAILED:
        failed = [t for t in result.tasks if t.status == FAILED]
        first = result.message or next((t.message or next((i.message for i in t.items if i.status == FAILED), "")
                                        for t in failed), "")
        names = ", ".join(t.name for t in failed)
        return f"failed: {names}{': ' if names and first else ''}{_short(first)}"
    if result.reboot_pending:
        return f"reboot pending: {_short(result.reboot_pending[0])} (apply --reboot)"
    stopped = [t.name for t in result.tasks if t.status == NOT_STARTED]
    if stopped:
        return f"not started: {len(stopped)} task(s), {stopped[0]} and after (the run was stopped)"
    if check and result.status == CHANGED:
        drifted = [t.name for t in result.tasks if t.status == CHANGED]
        return f"would change: {', '.join(drifted)}"
    return ""


def _short(text: str, limit: int = 100) -> str:
    """One line; cut on a terminal only: a pipe (a log, CI, grep) gets the whole reason."""
    text = " ".join(text.split())
    return text if len(text) <= limit or not sys.stdout.isatty() else text[:limit - 3] + "..."


def print_facts(host: str, facts: HostFacts | None, error: str = "", shown: Sequence[FactLine] = ()) -> None:
    """provision facts, for one host: who it is, then each capability's lines (registry.fact_lines); or why it
    could not be read."""
    click.echo(click.style(host, bold=True))
    if facts is None:
        click.echo(f"  {click.style('unreachable', fg='red')}: {error}")
        return
    s = facts.system
    click.echo(f"  system: {s.hostname}, {s.os_id} {s.os_version}, uid {s.uid}, "
               f"systemd {'running' if s.systemd_running else 'not running'}")
    print_lines(shown, "  ")


def print_lines(lines: Sequence[FactLine], indent: str = "") -> None:
    """Lines a capability made, each part in its tone."""
    for line in lines:
        click.echo(indent + "".join(click.style(text, **TONES[tone]) if tone else text for text, tone in line.parts))


# A FactLine part's tone, as click styles it.
TONES: dict[str, dict[str, Any]] = {WARNING: {"fg": "yellow"}, PROBLEM: {"fg": "red"}, HEADING: {"bold": True}}


COMMAND = re.compile(r"provision (apply|verify|facts|unlock|clocks|power|persistence)\b[^;()`]*[^;()`\s]")


def _echo_wrapped(prefix: str, styled: str, text: str, hang: int, commands: bool = False, columns: int = 100) -> None:
    """prefix + text, wrapped at `columns` under a hanging indent, never inside a word; `styled` is the prefix as
    shown (colors take no columns). With `commands`, a provision command in the text stays on one line, to be
    copied whole."""
    width = max(columns, hang + 20)  # a very narrow terminal: still a few words a line
    text = COMMAND.sub(lambda m: m.group().replace(" ", "\0"), text) if commands else text
    lines: list[str] = []
    for paragraph in text.split("\n"):
        indent = " " * hang if lines else prefix
        lines += textwrap.wrap(paragraph, width, initial_indent=indent, subsequent_indent=" " * hang,
                               break_long_words=False, break_on_hyphens=False) or [indent.rstrip()]
    click.echo("\n".join([styled + lines[0][len(prefix):], *lines[1:]]).replace("\0", " "))


def print_verdicts(verdicts: list[Verdict], verbose: bool = False, stopped: int | None = None) -> None:
    """provision verify: one line per host with its verdict; under it, one finding per cause (the check, what it
    expected, what it found, what to do, and the checks that fail only because of it), and what --active left
    untested; then the totals, and each host not tested with why. -v: the consequences' own words, every check
    that passed or did not apply (and why), and what --active measured. Long lines wrap at the terminal's width
    (100 on a pipe) with a hanging indent under their text, never inside a word. stopped: the signal that
    stopped the run, said first."""
    from provision.verify import FAIL, NOT_TESTED, PASS, UNREACHABLE as NOT_REACHED

    columns = shutil.get_terminal_size((100, 24)).columns
    echo = functools.partial(_echo_wrapped, columns=columns)
    width = min(max((len(v.host) for v in verdicts), default=4), HOST_COLUMN)
    colors = {PASS: "green", FAIL: "red", NOT_REACHED: "red", NOT_TESTED: "magenta"}
    if stopped:
        click.secho(f"Stopped by {signal_name(stopped)}: every node's load was stopped; what was measured until "
                    "then is judged below.", fg="magenta", bold=True)
    for v in verdicts:
        host = f"{v.host:<{width}}"
        name = click.style(host, fg=colors[v.status], bold=True)
        if v.status == NOT_REACHED:
            echo(f"{host}  UNREACHABLE  ", f"{name}  UNREACHABLE  ", v.message, len(host) + 15)
            continue
        status = f"{v.status.upper():<5} "
        echo(f"{host}  {status}", f"{name}  {status}", _verdict_counts(v, verbose), len(host) + 2 + len(status))
        for words in v.not_tested:
            echo("    untested ", f"    {click.style('untested', fg='magenta')} ", words, 13)
        for cause in v.findings:
            f = cause.failure
            echo("    failed ", f"    {click.style('failed', fg='red')} ",
                 f"{f.check}: expected {f.expected}; found {f.found}", 11)
            if f.fix:
                echo("           what to do: ", "           what to do: ", f.fix, 23, commands=True)
            if cause.consequences and verbose:
                for i, c in enumerate(cause.consequences):
                    lead = "           because of it: " if i == 0 else " " * 26
                    echo(lead, lead, f"{c.check}: {c.found}", 26)
            elif cause.consequences:
                names = ", ".join(dict.fromkeys(c.check for c in cause.consequences))
                echo("           because of it: ", "           because of it: ", names, 26)
        for text in v.notes:
            echo("    note   ", f"    {click.style('note', fg='yellow')}   ", text, 11)
        if verbose:
            for check in v.passed:
                echo("    passed ", f"    {click.style('passed', fg='green')} ", check, 11)
            for skipped in v.skipped:
                echo("    n/a    ", f"    {click.style('n/a', fg='cyan')}    ", skipped, 11)
            for words in measured_lines(v.figures):
                echo("    measured ", f"    {click.style('measured', fg='blue')} ", words, 13)
    counts = {status: sum(1 for v in verdicts if v.status == status)
              for status in (PASS, FAIL, NOT_TESTED, NOT_REACHED)}
    click.echo(f"\n{len(verdicts)} host{'' if len(verdicts) == 1 else 's'}: "
               + (", ".join(f"{n} {status}" for status, n in counts.items() if n) or "none"))
    untested: dict[str, list[str]] = {}  # why -> the nodes: one line for the nodes one cause left untested
    for v in verdicts:
        if v.not_tested:  # a failed node's too: a script's exit bit 64
            untested.setdefault("; ".join(v.not_tested), []).append(v.host)
    if untested:
        click.echo(click.style("Not tested:", bold=True))
        for why, hosts in untested.items():
            if len(hosts) == 1:
                echo(f"  {hosts[0]:<{width}}  ", f"  {hosts[0]:<{width}}  ", why, width + 4)
            else:  # the nodes, then why under them
                echo("  ", "  ", f"{', '.join(hosts)}:", 4)
                echo("      ", "      ", why, 6)


def measured_lines(figures: list[dict[str, Any]]) -> list[str]:
    """verify --active's figures, one line per part (the node's own first): "0000:3B:00.0: power_peak_watts
    187.2, sm_clock_median_mhz 1005, tflops 78.1"."""
    parts: dict[str, list[str]] = {}
    for figure in figures:
        parts.setdefault(figure["part"], []).append(f"{figure['figure']} {figure['value']:g}")
    ordered = sorted(parts.items(), key=lambda item: item[0] != "")
    return [f"{part or 'node'}: {', '.join(said)}" for part, said in ordered]


def _verdict_counts(verdict, verbose: bool) -> str:
    """"2 findings (6 of 14 checks failed), 5 not applicable": causes first, when fewer than the checks failed."""
    failed = len({f.check for f in verdict.failures})
    checks = len(verdict.passed) + failed
    findings = len(verdict.findings)
    said = f"{failed} of {checks} checks failed" if failed else f"{checks} checks passed"
    if findings and findings < failed:
        said = f"{findings} finding{'' if findings == 1 else 's'} ({said})"
    if verdict.skipped:  # a host the inventory asks little of is not silently "checked"
        said += f", {len(verdict.skipped)} not applicable" + ("" if verbose else " (-v says why)")
    return said


def print_reboots(outcomes, serial: int) -> None:
    """The rolling reboot, host by host in the order it went: when each went down and came back (seconds from
    the rollout's start), the driver it loaded; those refused or not reached, and why."""
    click.echo(click.style(f"\nReboots ({serial} at a time):", bold=True))
    width = min(max((len(o.host) for o in outcomes), default=4), HOST_COLUMN)
    for o in outcomes:
        name = f"{o.host:<{width}}"
        if o.status == "rebooted":
            down = f"down +{o.down} s, " if o.down is not None else ""
            slurm = "through Slurm, " if o.via == "slurm" else ""  # sent: asked of slurmctld; down: reboot issued
            click.echo(f"  {name}  {click.style('rebooted', fg='green')}  batch {o.batch}: {slurm}sent +{o.sent} s, "
                       f"{down}back +{o.back} s ({o.seconds} s); driver loaded: {o.loaded_after or 'none'}")
        else:
            click.echo(f"  {name}  {click.style(o.status, fg='red')}  {o.message}")

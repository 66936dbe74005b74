"""Human output: a line per host, task and target, then a summary. Fits a terminal; --json is for scripts."""

from __future__ import annotations

import click

from provision.facts.model import HostFacts
from provision.results import UNREACHABLE, HostResult
from provision.tasks.base import CHANGED, FAILED, OK, SKIPPED

COLORS = {OK: "green", CHANGED: "yellow", FAILED: "red", SKIPPED: "cyan", UNREACHABLE: "red"}


def status_word(status: str, check: bool) -> str:
    word = "would change" if check and status == CHANGED else status
    return click.style(f"{word:<12}", fg=COLORS.get(status))


def print_results(results: list[HostResult], check: bool, show_diff: bool) -> None:
    for result in results:
        click.echo(click.style(result.host, bold=True))
        if result.status == UNREACHABLE:
            click.echo(f"  {status_word(UNREACHABLE, check)} {result.message}")
            continue
        if result.message:
            click.echo(f"  {status_word(FAILED, check)} {result.message}")
        for task in result.tasks:
            if not task.items:
                click.echo(f"  {task.name:<18} {'-':<8} {status_word(task.status, check)} {task.message}")
            if task.message and task.items:
                click.echo(f"  {task.name:<18} {'-':<8} {status_word(task.status, check)} {task.message}")
            for item in task.items:
                detail = f"{item.what}: {item.before} -> {item.after}" if item.status == CHANGED or item.before else f"{item.what}: {item.after}"
                if item.message and item.message != "would change":
                    detail += f" ({item.message})"
                click.echo(f"  {task.name:<18} {item.target:<8} {status_word(item.status, check)} {detail}")
                if show_diff and item.diff:
                    for line in item.diff.rstrip("\n").splitlines():
                        click.echo("      " + _color_diff(line))
    print_summary(results, check)


def _color_diff(line: str) -> str:
    if line.startswith("+") and not line.startswith("+++"):
        return click.style(line, fg="green")
    if line.startswith("-") and not line.startswith("---"):
        return click.style(line, fg="red")
    return line


def print_summary(results: list[HostResult], check: bool) -> None:
    title = "Summary (check mode: nothing was changed)" if check else "Summary"
    click.echo("\n" + click.style(title, bold=True))
    width = max((len(r.host) for r in results), default=4)
    for r in results:
        if r.status == UNREACHABLE:
            click.echo(f"  {r.host:<{width}}  {click.style('UNREACHABLE', fg='red')}")
            continue
        c = r.counts()
        changed = "would change" if check else "changed"
        click.echo(f"  {r.host:<{width}}  ok={c[OK]} {changed}={c[CHANGED]} failed={c[FAILED]} "
                   f"skipped={c[SKIPPED]}  ({r.commands} command{'' if r.commands == 1 else 's'}, {r.seconds:.2f} s)")


def print_facts(host: str, facts: HostFacts | None, error: str = "") -> None:
    click.echo(click.style(host, bold=True))
    if facts is None:
        click.echo(f"  {click.style('unreachable', fg='red')}: {error}")
        return
    s, n = facts.system, facts.nvidia
    click.echo(f"  system: {s.hostname}, {s.os_id} {s.os_version}, uid {s.uid}, "
               f"systemd {'running' if s.systemd_running else 'not running'}")
    daemon = "not installed" if not n.persistenced_path else ("running" if n.persistenced_running else "stopped")
    if n.state != "ok":
        click.echo(f"  nvidia: {n.state}: {n.message}; nvidia-persistenced {daemon}")
        return
    click.echo(f"  nvidia: driver {n.driver_version}, {len(n.gpus)} GPU(s), nvidia-persistenced {daemon}")
    click.echo("  GPU  NAME                          BUS ID            PERSIST   POWER LIMIT (MIN..MAX)    APP CLOCKS MEM,SM  PCIe NOW/MAX")
    for g in n.gpus:
        power = f"{_num(g.power_limit)} W ({_num(g.power_min)}..{_num(g.power_max)})"
        clocks = f"{_num(g.app_clock_mem)},{_num(g.app_clock_sm)}" if g.app_clock_mem is not None else "N/A"
        pcie = f"gen{_num(g.pcie_gen_current)} x{_num(g.pcie_width_current)} / gen{_num(g.pcie_gen_max)} x{_num(g.pcie_width_max)}"
        persist = {True: "on", False: "off", None: "N/A"}[g.persistence]
        click.echo(f"  {g.index:<4} {g.name[:29]:<29} {g.bus_id:<17} {persist:<9} {power:<25} {clocks:<18} {pcie}")
    for lost in n.lost:  # not tuned until repaired; the boot file keeps its line
        click.echo(f"  {click.style('unreadable', fg='red')} {lost}")
    for note in n.notes:
        click.echo(f"  note: {note}")


def _num(value) -> str:
    if value is None:
        return "N/A"
    return f"{value:g}" if isinstance(value, float) else str(value)


def clock_models(all_facts: list[HostFacts]) -> list[dict]:
    """Supported clocks per GPU model, compact: memory clocks sharing the same graphics list are one row."""
    from provision import tuning

    models: dict[str, dict] = {}
    for facts in all_facts:
        for gpu in facts.nvidia.gpus:
            model = models.setdefault(gpu.name, {"model": gpu.name, "gpus": 0, "hosts": set(), "gpu": gpu})
            model["gpus"] += 1
            model["hosts"].add(facts.system.hostname)
    rows = []
    for model in models.values():
        gpu = model.pop("gpu")
        graphics: dict[int, list[int]] = {}
        for pair in gpu.supported_clocks:
            graphics.setdefault(pair.mem, []).append(pair.sm)
        groups: dict[tuple, list[int]] = {}
        for mem, sms in graphics.items():
            groups.setdefault(tuple(sms), []).append(mem)
        default = (f"{gpu.default_app_clock_mem},{gpu.default_app_clock_sm}"
                   if tuning.takes_app_clocks(gpu) else None)
        rows.append(model | {
            "hosts": len(model["hosts"]), "compute_cap": gpu.compute_cap, "application_clocks": default,
            "memory_lock": tuning.memory_lock_option(gpu), "gpu_lock": tuning.locks_gpu_clocks(gpu),
            "pairs": [{"mem": mems, "sm_min": min(sms), "sm_max": max(sms), "sm_values": len(sms)}
                      for sms, mems in groups.items()],
        })
    return rows


def print_clock_models(models: list[dict]) -> None:
    for m in models:
        app = (f"application clocks: yes (default {m['application_clocks']})" if m["application_clocks"]
               else "application clocks: no (use --locked)")
        locks = "locked: -lgc" + (f", memory {m['memory_lock']}" if m["memory_lock"] else ", no memory lock")
        click.echo(click.style(m["model"], bold=True) + f"  {m['gpus']} GPU(s) on {m['hosts']} host(s); {app}; "
                   f"{locks if m['gpu_lock'] else 'no locked clocks'}")
        for row in m["pairs"]:
            click.echo(f"  mem {', '.join(map(str, row['mem']))}: sm {row['sm_min']}..{row['sm_max']} "
                       f"({row['sm_values']} values)")
        if not m["pairs"]:
            click.echo("  no supported clocks reported")

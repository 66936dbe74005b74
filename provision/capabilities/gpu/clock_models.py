"""clocks --list: the clocks each GPU model supports, and which setters it takes, as rows (--json gives them as
they are) and as the lines the report prints (lines)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provision.capabilities.capability import HEADING, FactLine
from provision.capabilities.gpu import tuning

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts


def clock_models(all_facts: list[HostFacts]) -> list[dict[str, Any]]:
    """Supported clocks per GPU model, compact: memory clocks sharing the same graphics list are one row."""
    models: dict[str, dict[str, Any]] = {}
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
        groups: dict[tuple[int, ...], list[int]] = {}
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


def lines(models: list[dict[str, Any]]) -> list[FactLine]:
    """The rows of clock_models as `clocks --list` prints them: a line per model, then one per memory-clock row."""
    out = []
    for m in models:
        app = (f"application clocks: yes (default {m['application_clocks']})" if m["application_clocks"]
               else "application clocks: no (use --locked)")
        locks = "locked: -lgc" + (f", memory {m['memory_lock']}" if m["memory_lock"] else ", no memory lock")
        out.append(FactLine(((m["model"], HEADING), (f"  {m['gpus']} GPU(s) on {m['hosts']} host(s); {app}; "
                                                       f"{locks if m['gpu_lock'] else 'no locked clocks'}", ""))))
        out += [FactLine.plain(f"  mem {', '.join(map(str, row['mem']))}: sm {row['sm_min']}..{row['sm_max']} "
                               f"({row['sm_values']} values)") for row in m["pairs"]]
        if not m["pairs"]:
            out.append(FactLine.plain("  no supported clocks reported"))
    return out

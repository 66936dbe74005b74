"""clocks --list: the clocks each GPU model supports, and which setters it takes, as rows (output/report.py
print_clock_models prints them; --json gives them as they are)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

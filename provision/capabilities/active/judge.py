"""What an active run's samples show, per GPU: one finding per cause (core/checks.py's Finding), pure.

"Under load" is a sample at LOADED_UTIL% utilization or more: the ramp up and down, and a GPU the load did not
reach, are not judged as loaded. Each rule is what a user's failure looked like:
- lost: a GPU that stops answering mid-run ("[GPU is lost]", or no row after some instant): the V100 box's
  brownout, GPUs off the bus under DDP.
- power: transients above the cap. The cap is enforced as an average, so boost peaks pass it on every
  unpinned GPU; pinned clocks (application or locked) cut them. A note (p99 and peak against the cap, on
  power.draw.instant where the driver has it: the averaged draw hides them); a finding where the GPUs' draws at
  one instant add up past what the inventory says the supplies give them (provision_active.power_budget_watts), or in
  the finding of a GPU the supply dropped.
- power brake: the PSU asked the GPU to draw less (clock event reason 0x80): the supply is at its limit.
- clocks: below the clocks the node has set under load, with no power or thermal reason active: a GPU that does
  not hold what it was told. Application clocks are the clock it runs at under load; a locked range (`-lgc
  MIN,MAX`, GeForce) is "the range of desired locked GPU clock speed" (nvidia-smi -h), within which the GPU
  boosts as it would without it: under load it runs near the range's top (its maximum clock, where the top is
  above it) unless power or heat hold it down, so a GPU at the bottom of its range is held back.
- thermal: a thermal slowdown under load (0x20 SW, 0x40 HW thermal).
- PCIe: the link below its maximum generation or width under load (at idle a lower generation is power saving;
  under load it is a riser or slot that did not train).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from provision.capabilities.active.sampler import Sample
from provision.capabilities.gpu.clock_events import THERMAL
from provision.capabilities.gpu.model import GpuFacts
from provision.core import pci
from provision.core.checks import CRITICAL, WARNING, Finding

LOADED_UTIL = 50  # %: at or above, a sample is under load
POWER_REASONS = 0x4 | 0x8 | 0x80  # SW power cap, HW slowdown, HW power brake: clocks held down by power
POWER_BRAKE = 0x80
OVER_CAP = 1.05  # p99 above the cap by more than 5%: transients, not the meter's noise
CLOCK_SHORT = 0.95  # SM clock median under load below 95% of the set clock
RANGE_SHORT = 0.9  # ... below 90% of a locked range's top: boost bins step down with temperature, unflagged
LOST_GAP_S = 2.0  # a GPU with no row for this long before the run's last sample is gone


@dataclass(frozen=True)
class Target:
    """What the node has set on a GPU before the run (its facts): the cap, the clocks, the link's maximum."""

    uuid: str
    label: str  # "GPU2"
    bus_id: str
    cap: float | None = None  # enforced power limit, W
    sm_clock: int | None = None  # the SM clock it should reach under load: a locked range's top, else application clock
    clock_rule: str = ""  # "its application clocks 1005 MHz", "the top of its locked clocks 210,2520 MHz"
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    clock_share: float = CLOCK_SHORT  # below this share of sm_clock, with no power or thermal reason, it is held back


def target_of(gpu: GpuFacts) -> Target:
    """A GPU's facts before the run as the judge needs them."""
    locked = locked_top(gpu)
    if locked is not None:
        sm, rule, share = locked
    elif gpu.app_clock_sm is not None:
        sm, rule, share = gpu.app_clock_sm, f"its application clocks {gpu.app_clock_sm} MHz", CLOCK_SHORT
    else:
        sm, rule, share = None, "", CLOCK_SHORT
    return Target(gpu.uuid, gpu.label, gpu.bus_id, gpu.power_enforced or gpu.power_limit, sm, rule,
                  gpu.pcie_gen_max, gpu.pcie_width_max, share)


def locked_top(gpu: GpuFacts) -> tuple[int, str, float] | None:
    """(the SM clock a GPU with locked clocks should reach under load, in words, the share of it that is enough)
    or None where none are locked (or the record is not MIN,MAX in MHz: no target is better than a made-up one).
    The range's top, but never above the GPU's own maximum: it boosts within the range up to that. A range is
    boost, which steps down a bin or two as the GPU warms with no event reason: RANGE_SHORT, not CLOCK_SHORT."""
    locked = gpu.locked.get("sm", "default")
    bounds = [b.strip() for b in locked.split(",")]
    if locked == "default" or not all(b.isdigit() for b in bounds):
        return None
    low, top = min(int(b) for b in bounds), max(int(b) for b in bounds)
    if low == top:
        return top, f"its locked clocks {locked} MHz", CLOCK_SHORT
    if gpu.max_clock_sm and gpu.max_clock_sm < top:
        return gpu.max_clock_sm, f"its maximum {gpu.max_clock_sm} MHz within its locked clocks {locked} MHz", \
            RANGE_SHORT
    return top, f"the top of its locked clocks {locked} MHz", RANGE_SHORT


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank: a value that was sampled."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least the first
    return ordered[int(rank) - 1]


@dataclass
class Judged:
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said, not failed: transients past a cap, where no harm came
    supply: Finding | None = None  # the finding that says the supply could not carry the load (GPUs lost, past
    # the budget, a power brake): what a node lost under load follows from


def judge(targets: list[Target], samples: dict[str, list[Sample]], duration: float,
          budget: float | None = None) -> Judged:
    """Findings for every GPU of `targets` from its samples (sampler.by_gpu), in the targets' order; budget:
    provision_active.power_budget_watts, what the node's supplies give its GPUs. No sample at all is no judgement (the run
    says why: the check's own finding)."""
    judged = Judged()
    if not samples:
        return judged
    end = max((s.t for rows in samples.values() for s in rows), default=0.0)
    lost: list[tuple[float, Finding]] = []
    braked: list[Finding] = []
    for target in targets:
        rows = samples.get(target.uuid, [])
        went = _lost(target, rows, end, duration)
        if went:
            lost.append(went)
            continue  # what it did before it went is said in the loss's finding
        loaded = [s for s in rows if s.util is not None and s.util >= LOADED_UTIL]
        if not loaded:
            continue  # the run says a GPU the load never reached, with the load's own report
        judged.notes += [n for n in (_transients(target, loaded),) if n]
        brake = _brake(target, loaded)
        braked += [brake] if brake else []
        judged.findings += [f for f in (brake, _thermal(target, loaded), _clocks(target, loaded),
                                        _pcie(target, loaded)) if f]
    gone = one_loss(lost)
    over = _over_budget(samples, budget)
    if over and gone:  # the supply dropped them: said in their own finding
        gone = [replace(f, found=f"{f.found}; the GPUs' instant draws added up to {over[0]:.0f} W at +{over[1]:.1f} s, "
                                 f"past the {budget:g} W provision_active.power_budget_watts gives them") for f in gone]
    elif over:
        judged.findings.insert(0, Finding(
            f"the GPUs' instant draws within the {budget:g} W the supplies give them (provision_active.power_budget_watts)",
            f"{over[0]:.0f} W at +{over[1]:.1f} s",
            "a brownout waiting to happen (a GPU falls off the bus when the supply sags): pin the clocks "
            "(provision_gpu.clocks, or locked clocks on GeForce) as well as the power limit: the cap is enforced as an "
            "average, boost transients pass it", severity=WARNING))
    judged.findings = gone + judged.findings  # the GPUs lost first: the gravest
    judged.supply = next(iter(gone), None) or (judged.findings[0] if over else next(iter(braked), None))
    return judged


def lead(finding: Finding) -> str:
    """The `because` that names this finding of the check: by its first subject, else the check alone (a finding
    about the node, the first of the check's: the GPUs past the budget, inserted first)."""
    return f"{CHECK}:{finding.about[0]}" if finding.about else CHECK


def one_loss(lost: list[tuple[float, Finding]]) -> list[Finding]:
    """The GPUs a run lost as one finding, in the order they went: GPUs that drop one after another under one
    load are one cause (the supply sagged, and sagged again with the load on fewer GPUs; a shared riser or
    backplane), and each passive check of a lost GPU (no_gpu_is_lost, the count) follows from it."""
    if len(lost) < 2:
        return [f for _, f in lost]
    ordered = [f for _, f in sorted(lost, key=lambda pair: pair[0])]
    first = ordered[0]
    return [replace(first, expected="every GPU answering through the load",
                    found="; then ".join(f.found for f in ordered),
                    about=tuple(a for f in ordered for a in f.about))]


def _over_budget(samples: dict[str, list[Sample]], budget: float | None) -> tuple[float, float] | None:
    """(the highest sum of the GPUs' instant draws at one instant, when) where it passed the budget."""
    peak = peak_instant(samples) if budget else None
    return peak if peak is not None and budget and peak[0] > budget else None


def peak_instant(samples: dict[str, list[Sample]]) -> tuple[float, float] | None:
    """(the highest sum of the GPUs' instant draws in one sampler round, when in s); None without a power reading.
    A round prints every GPU within milliseconds: its rows are put together by their time rounded to 50 ms."""
    instants: dict[int, dict[str, float]] = {}
    for uuid, rows in samples.items():
        for row in rows:
            if row.peak_power is not None:
                draws = instants.setdefault(round(row.t * 20), {})
                draws[uuid] = max(draws.get(uuid, 0.0), row.peak_power)
    if not instants:
        return None
    when = max(instants, key=lambda k: sum(instants[k].values()))
    return sum(instants[when].values()), when / 20


CHECK = "gpus_hold_up_under_load"  # the check whose findings these are (active/checks.py)


def follows_on(subjects: tuple[str, ...]) -> tuple[str, ...]:
    """The leads of a consequence of what the samples found on these GPUs: a GPU slow under load follows from its
    clocks, power or PCIe finding where it has one (that says why), and is a finding of its own where not."""
    return tuple(f"{CHECK}:{subject}" for subject in subjects)


def critical_subjects(findings: list[Finding]) -> set[tuple[str, ...]]:
    """The `about` of each critical finding, and each of its subjects alone: the GPUs a load lost are one finding
    naming them all, and what follows from one of them (its thread's error, its Xid) names it alone."""
    grave = [f for f in findings if f.severity == CRITICAL]
    return {f.about for f in grave} | {(subject,) for f in grave for subject in f.about}


def about(target: Target) -> tuple[str, ...]:
    return (pci.slot(target.bus_id) or target.bus_id,)


def name(target: Target) -> str:
    return f"{target.label} ({pci.address(target.bus_id) or target.bus_id})"


def _peaks(rows: list[Sample]) -> list[float]:
    return [p for s in rows if (p := s.peak_power) is not None]


def _lost(target: Target, rows: list[Sample], end: float, duration: float) -> tuple[float, Finding] | None:
    """(when it went, the finding) for a GPU lost during the run."""
    gone = next((s for s in rows if s.lost), None)
    last = rows[-1].t if rows else None
    if gone is None and last is not None and end - last < LOST_GAP_S:
        return None
    when = gone.t if gone else last
    before = [s for s in rows if not s.lost]
    peak = max(_peaks(before), default=None)
    said = (f"{gone.lost} at +{when:.1f} s" if gone else
            f"no answer after +{when:.1f} s of {duration:g} s" if when is not None else "never answered the sampler")
    drew = f"; its last peak {peak:.0f} W" + (f" against a {target.cap:.0f} W cap" if target.cap else "") \
        if peak is not None else ""
    return (when if when is not None else 0.0), Finding(
        f"{name(target)} answering through the load", f"{name(target)} lost under load: {said}{drew}",
        "the load took it off the bus: drain the node and reboot it; a brownout (peaks the PSUs cannot carry) is "
        "the usual cause: pin the clocks (provision_gpu.clocks) as well as the power limit, then run verify --active again; "
        "the kernel log's Xid 79 names the same GPU",
        about=about(target), severity=CRITICAL)


def _brake(target: Target, loaded: list[Sample]) -> Finding | None:
    braked = [s for s in loaded if s.reasons is not None and s.reasons & POWER_BRAKE]
    if not braked:
        return None
    return Finding(
        f"{name(target)} under load without a power brake",
        f"{name(target)}: HW Power Brake Slowdown in {len(braked)} of {len(loaded)} samples under load, from "
        f"+{braked[0].t:.1f} s",
        "the power supply asked the GPUs to draw less: the node's load is at its PSUs' limit; pin the clocks and "
        "lower the power limit (provision_gpu.clocks, provision_gpu.power_limit), or check the PSUs (verify's BMC checks)",
        about=about(target), severity=CRITICAL)


def _transients(target: Target, loaded: list[Sample]) -> str | None:
    """A note where the GPU's instant draw passed its cap: the cap is an average, and boost transients pass it
    on every unpinned GPU; harm comes where a supply cannot carry them (provision_active.power_budget_watts says)."""
    peaks = _peaks(loaded)
    if not peaks or not target.cap:
        return None
    p99, peak = percentile(peaks, 99), max(peaks)
    if p99 <= target.cap * OVER_CAP:
        return None
    instant = all(s.power_instant is not None for s in loaded)
    return (f"{name(target)}: power p99 {p99:.0f} W, peak {peak:.0f} W under load against its {target.cap:.0f} W "
            "cap (transients the averaged cap lets through; pinned clocks cut them)"
            + ("" if instant else "; power.draw: this driver has no instant reading"))


def _thermal(target: Target, loaded: list[Sample]) -> Finding | None:
    hot = [s for s in loaded if s.reasons is not None and s.reasons & THERMAL]
    if not hot:
        return None
    top = max((s.temp for s in loaded if s.temp is not None), default=None)
    return Finding(
        f"{name(target)} under load without a thermal slowdown",
        f"{name(target)}: thermal slowdown in {len(hot)} of {len(loaded)} samples under load, from "
        f"+{hot[0].t:.1f} s" + (f"; up to {top} C" if top is not None else ""),
        "check its airflow (fans, blanking panels, a blocked intake), then its thermal paste or pads",
        # where the node read after the load still has no headroom, that check says it (with the temperatures)
        because=tuple(f"gpus_have_thermal_headroom:{subject}" for subject in about(target)),
        about=about(target), severity=WARNING)


def _clocks(target: Target, loaded: list[Sample]) -> Finding | None:
    if target.sm_clock is None:
        return None
    free = [s for s in loaded if s.sm is not None and not (s.reasons or 0) & (POWER_REASONS | THERMAL)]
    if not free:
        return None
    median = percentile([float(s.sm or 0) for s in free], 50)
    if median >= target.sm_clock * target.clock_share:
        return None
    return Finding(
        f"{name(target)} at {target.clock_rule} under load" + (
            "" if target.clock_share == CLOCK_SHORT else f" ({target.clock_share:.0%} of {target.sm_clock} MHz or "
                                                           "more, unless a power or thermal reason says why)"),
        f"{name(target)}: SM clock median {median:.0f} MHz over {len(free)} samples under load with no power or "
        "thermal reason active",
        "the GPU does not hold the clocks it was set to: read `nvidia-smi -q -d CLOCK,PERFORMANCE` on the node "
        "during a load; then `provision apply` to set them again",
        about=about(target), severity=WARNING)


def _pcie(target: Target, loaded: list[Sample]) -> Finding | None:
    short = [s for s in loaded
             if (target.pcie_gen_max and s.pcie_gen is not None and s.pcie_gen < target.pcie_gen_max)
             or (target.pcie_width_max and s.pcie_width is not None and s.pcie_width < target.pcie_width_max)]
    if len(short) * 2 <= len(loaded):  # most of the load: a link that retrains down, not one sample between
        return None
    worst = min(short, key=lambda s: ((s.pcie_gen or 0), (s.pcie_width or 0)))
    return Finding(
        f"{name(target)}'s PCIe link at Gen{target.pcie_gen_max} x{target.pcie_width_max} under load",
        f"{name(target)}: Gen{worst.pcie_gen} x{worst.pcie_width} in {len(short)} of {len(loaded)} samples "
        "under load",
        "the link trained below its maximum: reseat the card, or replace its riser or cable; then verify --active "
        "again (no_pcie_errors_on_the_gpu_links_since_boot says whether it also logs errors)",
        about=about(target), severity=WARNING)

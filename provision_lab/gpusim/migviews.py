"""What nvidia-smi prints of MIG: `mig -lgip`, `-lgipp`, `-lgi`, `-lcip`, `-lcipp`, `-lci` (the 580 drivers'
widths), the MIG devices of plain `nvidia-smi` and of `-L`. Sources: gpu_models.md, "MIG"."""

from __future__ import annotations

from .mig import (BAR1_PER_SLOT_MIB, free_count, gi_memory_mib, listed_instances, mig_devices,
                  mig_uuid, profile_of, profiles)
from .migci import ci_free_count, ci_name, ci_profile_of, ci_profiles, ci_span

LGIP_RULE = "+" + "-" * 79 + "+"
LGIP_HEAD = [
    LGIP_RULE,
    "| GPU instance profiles:                                                        |",
    "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
    "|                                Free/Total   GiB              CE    JPEG  OFA  |",
    "|" + "=" * 79 + "|",
]
LGI_RULE = "+" + "-" * 57 + "+"
LGI_HEAD = [
    LGI_RULE,
    "| GPU instances:                                          |",
    "| GPU   Name               Profile  Instance   Placement  |",
    "|                            ID       ID       Start:Size |",
    "|" + "=" * 57 + "|",
]
LCI_RULE = "+" + "-" * 68 + "+"
LCI_HEAD = [
    LCI_RULE,
    "| Compute instances:                                                 |",
    "| GPU     GPU       Name             Profile   Instance   Placement  |",
    "|       Instance                       ID        ID       Start:Size |",
    "|         ID                                                         |",
    "|" + "=" * 68 + "|",
]
LCIP_RULE = "+" + "-" * 86 + "+"
LCIP_HEAD = [
    LCIP_RULE,
    "| Compute instance profiles:                                                           |",
    "| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |",
    "|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |",
    "|         ID                                                          CE    JPEG       |",
    "|" + "=" * 86 + "|",
]
TABLE_RULE = "+" + "-" * 89 + "+"
TABLE_GRID = "+------------------+----------------------------------+-----------+-----------------------+"
TABLE_HEAD = [
    TABLE_RULE,
    "| MIG devices:                                                                            |",
    TABLE_GRID,
    "| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |",
    "|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
    "|                  |                                  |        ECC|                       |",
    "|==================+==================================+===========+=======================|",
]
NO_MIG_DEVICES = "|  No MIG devices found" + " " * 67 + "|"


def lgip_rows(index: int, profile, free: int) -> list:
    p = profile
    return [
        f"|{index:>4}  {'MIG ' + p.name:<20}{p.id:>2}{free:>6}/{p.total:<9}{p.memory:<11}{'No':<7}{p.sm:<7}{p.dec:<6}"
        f"{p.enc:<4}|",
        f"|{'':62}{p.ce:>2}{'':5}{p.jpeg:<6}{p.ofa:<4}|",
        LGIP_RULE,
    ]


def render_lgip(gpus: list) -> str:
    lines = list(LGIP_HEAD)
    for g in gpus:
        for p in profiles(g.record):
            lines += lgip_rows(g.index, p, free_count(g.record, p))
    return "\n".join(lines) + "\n"


def render_lgipp(gpus: list) -> str:
    lines = []
    for g in gpus:
        for p in profiles(g.record):
            label = "Placements:" if len(p.starts) > 1 else "Placement :"
            starts = ",".join(str(s) for s in p.starts)
            lines.append(f"GPU {g.index:>2} Profile ID {p.id:>2} {label} {{{starts}}}:{p.size}")
    return "".join(line + "\n" for line in lines)


def render_lgi(gpus: list) -> str:
    lines = list(LGI_HEAD)
    for g in gpus:
        for gi in listed_instances(g.record):
            p = profile_of(g.record, gi)
            lines += [f"|{g.index:>4}  {'MIG ' + p.name:<22}{p.id:>2}{gi['id']:>9}{'':10}{gi['start']}:{p.size:<6}|",
                      LGI_RULE]
    return "\n".join(lines) + "\n"


def render_lci(gpus: list, gi_ids: set | None) -> str:
    lines = list(LCI_HEAD)
    for g in gpus:
        for gi in listed_instances(g.record, gi_ids):
            for ci in sorted(gi["cis"], key=lambda c: c["id"]):
                span = ci_span(g.record, gi, ci)
                lines += [f"|{g.index:>4}{gi['id']:>7}{'':7}{ci_name(g.record, gi, ci):<20}{ci['profile']:>2}"
                          f"{ci['id']:>10}{'':10}{f'{span.start}:{len(span)}':<8}|", LCI_RULE]
    return "\n".join(lines) + "\n"


def render_lcip(gpus: list, gi_ids: set | None) -> str:
    """Each GPU instance's compute instance profiles: Free beside the compute instances it holds, `*` the
    default; SM its own, the engines its GPU instance's (shared)."""
    lines = list(LCIP_HEAD)
    for g in gpus:
        for gi in listed_instances(g.record, gi_ids):
            gip = profile_of(g.record, gi)
            for p in ci_profiles(g.record, gi):
                count = f"{ci_free_count(g.record, gi, p)}/{p.total}"
                lines += [f"|{g.index:>4}{gi['id']:>7}{'':7}{'MIG ' + p.name:<20}{p.id:>2}{'*' if p.default else ' '}"
                          f"{'':5}{count:<5}{p.sm:>11}{gip.dec:>9}{gip.enc:>6}{gip.ofa:>6}{'':3}|",
                          f"|{'':68}{gip.ce:>3}{gip.jpeg:>6}{'':9}|", LCIP_RULE]
    return "\n".join(lines) + "\n"


def render_lcipp(gpus: list, gi_ids: set | None) -> str:
    """-lgipp's wording with the GPU instance named (inferred: no real -lcipp output was found)."""
    lines = []
    for g in gpus:
        for gi in listed_instances(g.record, gi_ids):
            for p in ci_profiles(g.record, gi):
                label = "Placements:" if len(p.starts) > 1 else "Placement :"
                starts = ",".join(str(s) for s in p.starts)
                lines.append(f"GPU {g.index:>2} GI {gi['id']:>2} Profile ID {p.id:>2} {label} {{{starts}}}:{p.slices}")
    return "".join(line + "\n" for line in lines)


def render_mig_table(gpus: list) -> list:
    """The MIG devices box of plain nvidia-smi, for the GPUs in MIG mode (none: no box)."""
    lines, any_mig, count = list(TABLE_HEAD), False, 0
    for g in gpus:
        if not g.mig_enabled:
            continue
        any_mig = True
        for dev, (gi, ci) in enumerate(mig_devices(g.record)):
            p, sm = profile_of(g.record, gi), ci_profile_of(g.record, gi, ci).sm  # the memory is the GPU instance's
            unc = g.record["ecc_volatile"] if g.ecc_enabled else "N/A"
            lines += [
                f"|{g.index:>3}  {gi['id']:>3} {ci['id']:>3} {dev:>3}  |{0:>16}MiB / {gi_memory_mib(g.record, gi):>5}MiB    |"
                f" {sm:<3}{unc:>6} |{p.ce:>3}{p.enc:>4}{p.dec:>5}{p.ofa:>5}{p.jpeg:>5} |",
                f"|{'':18}|{0:>16}MiB / {BAR1_PER_SLOT_MIB * p.size:>5}MiB    |{'':11}|{'':23}|",
                TABLE_GRID,
            ]
            count += 1
    if not any_mig:
        return []
    if not count:
        lines += [NO_MIG_DEVICES, TABLE_RULE]
    return lines


def q_mig_devices(g) -> list:
    """-q's MIG Device blocks, after MIG Mode, one per compute instance (the wording of a real -q with an instance,
    code index file id 69774384440, driver 610: its memory is the GPU instance's, shared by its compute
    instances); none where MIG is off or nothing is made."""
    lines: list[tuple] = []
    if not g.mig_enabled:
        return lines
    for dev, (gi, ci) in enumerate(mig_devices(g.record)):
        p, memory = profile_of(g.record, gi), gi_memory_mib(g.record, gi)
        bar1 = BAR1_PER_SLOT_MIB * p.size
        lines += [(1, "MIG Device", None), (2, "Index", dev), (2, "GPU Instance ID", gi["id"]),
                  (2, "Compute Instance ID", ci["id"]), (2, "Device Attributes", None), (3, "Shared", None),
                  (4, "Multiprocessor count", ci_profile_of(g.record, gi, ci).sm), (4, "Copy Engine count", p.ce),
                  (4, "Encoder count", p.enc), (4, "Decoder count", p.dec), (4, "OFA count", p.ofa),
                  (4, "JPG count", p.jpeg),
                  (2, "Shared FB Memory Usage", None), (3, "Total", f"{memory} MiB"), (3, "Reserved", "0 MiB"),
                  (3, "Used", "0 MiB"), (3, "Free", f"{memory} MiB"),
                  (2, "Shared BAR1 Memory", None), (3, "Total", f"{bar1} MiB"), (3, "Used", "0 MiB"),
                  (3, "Free", f"{bar1} MiB")]
    return lines


def render_mig_list(g) -> str:
    """-L's lines for a GPU's MIG devices, under its own line."""
    return "".join(f"  {ci_name(g.record, gi, ci):<16}Device {dev:>2}: (UUID: {mig_uuid(g.record, gi, ci)})\n"
                   for dev, (gi, ci) in enumerate(mig_devices(g.record)))

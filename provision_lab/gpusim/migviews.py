"""What nvidia-smi prints of MIG: `mig -lgip`, `-lgipp`, `-lgi`, `-lci` (the 580 drivers' widths), the MIG
devices of plain `nvidia-smi` and of `-L`. Sources: gpu_models.md, "MIG"."""

from __future__ import annotations

from .mig import (BAR1_PER_SLOT_MIB, ci_name, free_count, gi_memory_mib, gpu_instances, mig_devices, mig_uuid,
                  profile_of, profiles)

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
        for gi in gpu_instances(g.record):
            p = profile_of(g.record, gi)
            lines += [f"|{g.index:>4}  {'MIG ' + p.name:<22}{p.id:>2}{gi['id']:>9}{'':10}{gi['start']}:{p.size:<6}|",
                      LGI_RULE]
    return "\n".join(lines) + "\n"


def render_lci(gpus: list, gi_ids: set | None) -> str:
    lines = list(LCI_HEAD)
    for g in gpus:
        for gi, ci in mig_devices(g.record):
            if gi_ids is None or gi["id"] in gi_ids:
                slices = profile_of(g.record, gi).slices
                lines += [f"|{g.index:>4}{gi['id']:>7}{'':7}{ci_name(g.record, gi):<20}{ci['profile']:>2}{ci['id']:>10}"
                          f"{'':10}{'0:' + str(slices):<8}|", LCI_RULE]
    return "\n".join(lines) + "\n"


def render_mig_table(gpus: list) -> list:
    """The MIG devices box of plain nvidia-smi, for the GPUs in MIG mode (none: no box)."""
    lines, any_mig, count = list(TABLE_HEAD), False, 0
    for g in gpus:
        if not g.mig_enabled:
            continue
        any_mig = True
        for dev, (gi, ci) in enumerate(mig_devices(g.record)):
            p = profile_of(g.record, gi)
            unc = g.record["ecc_volatile"] if g.ecc_enabled else "N/A"
            lines += [
                f"|{g.index:>3}  {gi['id']:>3} {ci['id']:>3} {dev:>3}  |{0:>16}MiB / {gi_memory_mib(g.record, gi):>5}MiB    |"
                f" {p.sm:<3}{unc:>6} |{p.ce:>3}{p.enc:>4}{p.dec:>5}{p.ofa:>5}{p.jpeg:>5} |",
                f"|{'':18}|{0:>16}MiB / {BAR1_PER_SLOT_MIB * p.size:>5}MiB    |{'':11}|{'':23}|",
                TABLE_GRID,
            ]
            count += 1
    if not any_mig:
        return []
    if not count:
        lines += [NO_MIG_DEVICES, TABLE_RULE]
    return lines


def render_mig_list(g) -> str:
    """-L's lines for a GPU's MIG devices, under its own line."""
    return "".join(f"  {ci_name(g.record, gi):<16}Device {dev:>2}: (UUID: {mig_uuid(g.record, gi, ci)})\n"
                   for dev, (gi, ci) in enumerate(mig_devices(g.record)))

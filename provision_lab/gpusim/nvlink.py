"""nvidia-smi nvlink -s and -e: each link's speed (or <inactive>) and its error counters, as real drivers print
them (formats and sources: gpu_models.md, "NVLink"; the parser that reads them: provision/capabilities/gpu/
nvlink.py). A GPU prints its links when another GPU of its model is bonded to it (topo.nvlinks); one without a
peer prints nothing, as the captured single H100 does."""

from __future__ import annotations

from .errors import SimError
from .gpu import Gpu
from .topo import nvlinks

ALL_INACTIVE = "NVML: Unable to retrieve NVLink information as all links are inActive\n"
COUNTERS = ("Replay Errors", "Recovery Errors", "CRC Errors")  # -e, per link, in this order
VIEWS = {"-s": "status", "--status": "status", "-e": "errors", "--errorcounters": "errors"}


def parse_nvlink_args(args: list) -> tuple:
    """(view, -i value or None) of `nvlink -s|-e [-i ID]`; other options are not simulated."""
    view, gpu, rest = None, None, list(args)
    while rest:
        arg = rest.pop(0)
        name, _, inline = arg.partition("=")
        if arg in VIEWS and view is None:
            view = VIEWS[arg]
        elif name in ("-i", "--id") and gpu is None and (inline or rest):
            gpu = inline or rest.pop(0)
        else:
            view = None
            break
    if view is None:
        raise SimError(f"nvidia-smi nvlink {' '.join(args)} is not simulated (only -s or -e, with -i)")
    return view, gpu


def links_of(g: Gpu, every: list) -> int:
    """How many NVLinks the GPU shows: its model's, where a peer is bonded to it; else none."""
    return g.model.nvlink_links if any(nvlinks(g, other) for other in every if other is not g) else 0


def down(g: Gpu) -> set:
    return set(g.record["nvlink_down"])


def header(g: Gpu) -> str:
    return f"GPU {g.index}: {g.model.name} (UUID: {g.uuid})\n"


def render_nvlink(view: str, gpus: list, every: list) -> str:
    """The view of the GPUs asked for (-i), their peers looked for among every GPU."""
    render = render_status if view == "status" else render_errors
    return "".join(render(g, links_of(g, every)) for g in gpus)


def render_status(g: Gpu, links: int) -> str:
    if not links:
        return ""
    if down(g) >= set(range(links)):
        return header(g) + ALL_INACTIVE
    return header(g) + "".join(f"\t Link {k}: {'<inactive>' if k in down(g) else g.model.nvlink_speed}\n"
                               for k in range(links))


def render_errors(g: Gpu, links: int) -> str:
    """Three counters per active link, then a blank line (the A100's -e); an inactive link is left out."""
    if not links:
        return ""
    up = [k for k in range(links) if k not in down(g)]
    if not up:
        return header(g) + ALL_INACTIVE
    counts = g.record["nvlink_errors"]
    return header(g) + "".join(
        "".join(f"\t Link {k}: {name}: {n}\n" for name, n in zip(COUNTERS, counts.get(str(k), (0, 0, 0)))) + "\n"
        for k in up)

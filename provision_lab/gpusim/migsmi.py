"""`nvidia-smi mig`: its options, and each listing, creation and destruction against the simulated GPUs. What it
prints: migviews.py; the wording of messages and errors: gpu_models.md, "MIG"."""

from __future__ import annotations

from .apps import running
from .env import effective_uid
from .errors import Exit, HELP_HINT, RC_INVALID, RC_NOT_FOUND, RC_NO_PERMISSION, RC_OK, RC_OTHER
from .helptext import MIG_HELP
from .mig import create_gi, find_profile, gpu_instances, has_mig
from .migci import create_ci, default_ci_profile, find_ci_profile
from .migviews import LCI_HEAD, render_lci, render_lcip, render_lcipp, render_lgi, render_lgip, render_lgipp

NO_MIG_ENABLED = "No MIG-enabled devices found.\n"
MIG_OPTIONS = {  # name: (spellings, takes a value: True, optional: None)
    "help": (("-h", "--help"), False), "id": (("-i", "--id"), True),
    "gi": (("-gi", "--gpu-instance-id"), True), "ci": (("-ci", "--compute-instance-id"), True),
    "lgip": (("-lgip", "--list-gpu-instance-profiles"), False),
    "lgipp": (("-lgipp", "--list-gpu-instance-possible-placements"), False),
    "C": (("-C", "--default-compute-instance"), False), "cgi": (("-cgi", "--create-gpu-instance"), True),
    "dgi": (("-dgi", "--destroy-gpu-instance"), False), "lgi": (("-lgi", "--list-gpu-instances"), False),
    "lcip": (("-lcip", "--list-compute-instance-profiles"), False),
    "lcipp": (("-lcipp", "--list-compute-instance-possible-placements"), False),
    "cci": (("-cci", "--create-compute-instance"), None), "dci": (("-dci", "--destroy-compute-instance"), False),
    "lci": (("-lci", "--list-compute-instances"), False),
}
MIG_SPELLINGS = {spelling: name for name, (spellings, _) in MIG_OPTIONS.items() for spelling in spellings}
ACTIONS = ("lgip", "lgipp", "cgi", "dgi", "lgi", "lcip", "lcipp", "cci", "dci", "lci")


def parse_mig_args(argv: list) -> dict:
    opts: dict = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, _, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in MIG_SPELLINGS:
            raise Exit(f"ERROR: Option {arg} is not recognized. {HELP_HINT}\n", RC_INVALID)
        key = MIG_SPELLINGS[name]
        takes = MIG_OPTIONS[key][1]
        if takes is False:
            opts[key] = True
        elif inline or "=" in arg:
            opts[key] = inline
        elif args and (takes or not args[0].startswith("-")):
            opts[key] = args.pop(0)
        elif takes:
            raise Exit(f"ERROR: Option {name} is missing its value. {HELP_HINT}\n", RC_INVALID)
        else:
            opts[key] = ""  # -cci without a profile: the default one
    return opts


def ids(spec: str | None) -> set | None:
    return None if spec is None else {int(part) for part in spec.split(",") if part.strip().isdigit()}


def mig_main(host, gpus: list, argv: list) -> tuple:
    """(output, rc) of `nvidia-smi mig ARGS` over the selected GPUs (-i)."""
    opts = parse_mig_args(argv)
    if opts.get("help"):
        return MIG_HELP, RC_OK
    actions = [key for key in ACTIONS if key in opts]
    if len(actions) != 1:
        raise Exit(f"Invalid combination of input arguments. {HELP_HINT}\n", RC_INVALID)
    action = actions[0]
    if action in ("lgip", "lgipp"):  # listed with MIG mode off too, on every GPU that has MIG
        capable = [g for g in gpus if has_mig(g.record)]
        return (render_lgip if action == "lgip" else render_lgipp)(capable) if capable else NO_MIG_ENABLED, RC_OK
    enabled = [g for g in gpus if g.mig_enabled]
    if not enabled:
        return NO_MIG_ENABLED, RC_OK if action in ("lgi", "lci", "lcip", "lcipp") else RC_NOT_FOUND
    if action == "lgi":
        return (render_lgi(enabled), RC_OK) if any(gpu_instances(g.record) for g in enabled) else (
            "No GPU instances found.\n", RC_OK)
    if action == "lci":
        listed = render_lci(enabled, ids(opts.get("gi")))
        return (listed, RC_OK) if listed.count("\n") > len(LCI_HEAD) else ("No compute instances found.\n", RC_OK)
    if action in ("lcip", "lcipp"):  # per GPU instance: none, nothing to list (inferred)
        if not any(gpu_instances(g.record) for g in enabled):
            return "No GPU instances found.\n", RC_OK
        return (render_lcip if action == "lcip" else render_lcipp)(enabled, ids(opts.get("gi"))), RC_OK
    if effective_uid() != 0:
        return denied(action), RC_NO_PERMISSION
    run = {"cgi": create_gis, "cci": create_cis, "dgi": destroy_gis, "dci": destroy_cis}[action]
    return run(enabled, opts)


def denied(action: str) -> str:
    what = {"cgi": "create GPU instances", "cci": "create compute instances", "dgi": "destroy GPU instances",
            "dci": "destroy compute instances"}[action]
    return f"Failed to {what}: Insufficient Permissions\n"


def create_gis(gpus: list, opts: dict) -> tuple:
    """-cgi PROFILE[:START],... [-C] on each GPU in turn; the first failure ends the run."""
    lines: list[str] = []
    for g in gpus:
        for spec in opts["cgi"].split(","):
            failure = create_one_gi(g, spec, lines, bool(opts.get("C")))
            if failure:
                reason, rc = failure
                lines += [f"Unable to create a GPU instance on GPU {g.index:>2} using profile {spec}: {reason}",
                          f"Failed to create GPU instances: {reason}"]
                return "\n".join(lines) + "\n", rc
    return "\n".join(lines) + "\n", RC_OK


def create_one_gi(g, spec: str, lines: list, with_ci: bool) -> tuple | None:
    name, _, start = spec.partition(":")
    profile = find_profile(g.record, name)
    if profile is None or (start and (not start.isdigit() or int(start) not in profile.starts)):
        return "Invalid Argument", RC_INVALID
    if running(g.record):
        return "In use by another client", RC_OTHER
    gi = create_gi(g.record, profile, int(start) if start else None)
    if gi is None:
        return "Insufficient Resources", RC_OTHER
    lines.append(f"Successfully created GPU instance ID {gi['id']:>2} on GPU {g.index:>2} using profile "
                 f"MIG {profile.name} (ID {profile.id:>2})")
    if with_ci:
        failure = create_one_ci(g, gi, None, lines)  # a new GPU instance always has room for its default one
        assert failure is None, failure
    return None


def created_ci_line(g, gi: dict, ci: dict, profile) -> str:
    return (f"Successfully created compute instance ID {ci['id']:>2} on GPU {g.index:>2} GPU instance ID "
            f"{gi['id']:>2} using profile MIG {profile.name} (ID {profile.id:>2})")


def create_cis(gpus: list, opts: dict) -> tuple:
    """-cci [PROFILE,...]: each profile (by name or ID; none: the default) in each selected GPU instance (-gi;
    default: all) in turn; the first failure ends the run."""
    lines: list[str] = []
    wanted = ids(opts.get("gi"))
    specs = opts["cci"].split(",") if opts["cci"] else [None]
    for g in gpus:
        for gi in gpu_instances(g.record):
            if wanted is not None and gi["id"] not in wanted:
                continue
            for spec in specs:
                failure = create_one_ci(g, gi, spec, lines)
                if failure:
                    reason, rc = failure
                    lines += [f"Unable to create a compute instance on GPU {g.index:>2} GPU instance ID {gi['id']:>2} "
                              f"using profile {spec or 'default'}: {reason}",
                              f"Failed to create compute instances: {reason}"]
                    return "\n".join(lines) + "\n", rc
    if not lines:
        return "Failed to create compute instances: Not Found\n", RC_NOT_FOUND
    return "\n".join(lines) + "\n", RC_OK


def create_one_ci(g, gi: dict, spec: str | None, lines: list) -> tuple | None:
    profile = default_ci_profile(g.record, gi) if spec is None else find_ci_profile(g.record, gi, spec)
    if profile is None:
        return "Invalid Argument", RC_INVALID
    ci = create_ci(g.record, gi, profile)
    if ci is None:
        return "Insufficient Resources", RC_OTHER
    lines.append(created_ci_line(g, gi, ci, profile))
    return None


def destroy_cis(gpus: list, opts: dict) -> tuple:
    lines, gis, cis = [], ids(opts.get("gi")), ids(opts.get("ci"))
    for g in gpus:
        if running(g.record):
            return "Failed to destroy compute instances: In use by another client\n", RC_OTHER
        for gi in gpu_instances(g.record):
            if gis is not None and gi["id"] not in gis:
                continue
            for ci in sorted(gi["cis"], key=lambda c: c["id"]):
                if cis is None or ci["id"] in cis:
                    gi["cis"].remove(ci)
                    lines.append(f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU {g.index:>2} "
                                 f"GPU instance ID {gi['id']:>2}")
    if not lines:
        return "Failed to destroy compute instances: Not Found\n", RC_NOT_FOUND
    return "\n".join(lines) + "\n", RC_OK


def destroy_gis(gpus: list, opts: dict) -> tuple:
    """-dgi: each selected GPU instance in turn; one that still holds a compute instance ends the run."""
    lines, wanted = [], ids(opts.get("gi"))
    for g in gpus:
        for gi in gpu_instances(g.record):
            if wanted is not None and gi["id"] not in wanted:
                continue
            if gi["cis"] or running(g.record):
                lines += [f"Unable to destroy GPU instance ID {gi['id']:>2} from GPU {g.index:>2}: In use by another "
                          "client", "Failed to destroy GPU instances: In use by another client"]
                return "\n".join(lines) + "\n", RC_OTHER
            g.record["gis"] = [other for other in gpu_instances(g.record) if other["id"] != gi["id"]]
            lines.append(f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {g.index:>2}")
    if not lines:
        return "Failed to destroy GPU instances: Not Found\n", RC_NOT_FOUND
    return "\n".join(lines) + "\n", RC_OK

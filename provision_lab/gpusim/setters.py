"""nvidia-smi's setters (-pm, -pl, -ac, -lgc, -lmc, -lmcd and their resets; the modes: -e, -c, -mig): what each
does to a GPU, and how a run over several GPUs warns, stops and exits."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable

from .env import effective_uid
from .errors import RC_OTHER, RC_INVALID, RC_NOT_SUPPORTED, RC_NO_PERMISSION, RC_OK
from .gpu import Gpu, Host, enabled
from .kernel import kmsg
from .modes import COMPUTE_MODES, mig_held, mig_on

ALL_DONE = "All done."
MOVING_ON = "Treating as warning and moving on."
TERMINATING = "Terminating early due to previous errors."
# The 5xx-driver wording (seen after -lgc and -mig); older drivers said "This settings will go
# back to default as soon as driver unloads ...". Printed after each volatile setting.
PERSISTENCE_WARNING = ("\nWarning: persistence mode is disabled on device {bus}. See the Known Issues section of "
                       "the nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get more "
                       "information on how to enable persistence mode.")
PM_DEPRECATED = ("NVRM: Persistence mode is deprecated and will be removed in a future release. "
                 "Please use nvidia-persistenced instead.")


# --- setters --------------------------------------------------------------------------------


class Outcome(namedtuple("Outcome", "kind lines rc", defaults=(RC_OK,))):
    """What a setter did to one GPU: kind ok, warn (moves on) or error (stops); the lines to print; exit code."""

    __slots__ = ()


def ok(*lines: str) -> Outcome:
    return Outcome("ok", list(lines))


def warn(line: str, rc: int = RC_NOT_SUPPORTED) -> Outcome:
    return Outcome("warn", [line, MOVING_ON], rc)


def error(line: str, rc: int) -> Outcome:
    return Outcome("error", [line], rc)


# option: "pm", "pl", ...; parse: the option's value -> what plan() takes, raises ValueError on nonsense;
# supported: Model -> bool; unsupported: the warning where not supported; denied: the message for a user who
# is not root; plan: (host, gpu, value) -> Outcome (nothing to do / refused) or a callable that applies it;
# volatile: lost when the driver unloads (warn when the GPU has no persistence); after: a line printed after
# "All done." when the run set anything
Setter = namedtuple("Setter", "option parse supported unsupported denied plan volatile after", defaults=("",))


def parse_bool(value: str) -> bool:
    choices = {"0": False, "DISABLED": False, "1": True, "ENABLED": True}
    if value.upper() not in choices:
        raise ValueError(value)
    return choices[value.upper()]


def parse_pair(value: str) -> tuple:
    parts = [int(part) for part in value.split(",")]
    if len(parts) != 2:
        raise ValueError(value)
    return parts[0], parts[1]


def parse_range(value: str) -> tuple:
    """MIN,MAX or one value for both."""
    parts = [int(part) for part in value.split(",")]
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or parts[0] < 0 or parts[0] > parts[1]:
        raise ValueError(value)
    return parts[0], parts[1]


def parse_clock(value: str) -> int:
    clock = int(value)
    if clock <= 0:
        raise ValueError(value)
    return clock


def parse_watts(value: str) -> float:
    watts_value = float(value)
    if watts_value != watts_value or watts_value < 0:  # NaN or negative
        raise ValueError(value)
    return watts_value


def parse_compute_mode(value: str) -> str:
    """0/DEFAULT, 2/PROHIBITED, 3/EXCLUSIVE_PROCESS (1/EXCLUSIVE_THREAD, deprecated, is not simulated)."""
    name = COMPUTE_MODES.get(value, value.upper())
    if name not in COMPUTE_MODES.values():
        raise ValueError(value)
    return name


def no_value(value) -> None:
    return None


def plan_persistence(host: Host, g: Gpu, want: bool):
    if g.persistent == want:
        return ok(f"Persistence mode is already {enabled(want)} for GPU {g.bus_id}.")

    def apply() -> Outcome:
        if want and host.daemon:  # the daemon holds the GPU: ask it
            g.record["daemon_pm"] = True
            return ok(f"Enabled persistence mode via daemon for GPU {g.bus_id}.")
        if want:  # legacy persistence: works, and the 580 driver logs that it is deprecated
            g.record["legacy_pm"] = True
            kmsg(host.state, PM_DEPRECATED)
            return ok(f"Enabled persistence mode for GPU {g.bus_id}.")
        g.record["legacy_pm"] = False
        if host.daemon:
            g.record["daemon_pm"] = False
        return ok(f"Disabled persistence mode for GPU {g.bus_id}.")
    return apply


def plan_power_limit(host: Host, g: Gpu, value: float):
    m = g.model
    if not m.power_min <= value <= m.power_max:
        return error(f"Provided power limit {value:.2f} W is not a valid power limit which should be between "
                     f"{m.power_min:.2f} W and {m.power_max:.2f} W for GPU {g.bus_id}", RC_INVALID)

    def apply() -> Outcome:
        before = g.power_limit
        g.record["power_limit"] = value
        return ok(f"Power limit for GPU {g.bus_id} was set to {value:.2f} W from {before:.2f} W.")
    return apply


def plan_app_clocks(host: Host, g: Gpu, pair: tuple):
    memory, graphics = pair
    if graphics not in g.model.graphics_clocks(memory):
        return warn(f'Specified clock combination "(MEM {memory}, SM {graphics})" is not supported for GPU '
                    f"{g.bus_id}. Run 'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock "
                    "combinations", RC_INVALID)
    return setting(g, "app_clocks", [memory, graphics],
                   f'Applications clocks set to "(MEM {memory}, SM {graphics})" for GPU {g.bus_id}')


def plan_locked_gpu(host: Host, g: Gpu, bounds: tuple):
    return setting(g, "locked_gpu", list(bounds),
                   f'GPU clocks set to "(gpuClkMin {bounds[0]}, gpuClkMax {bounds[1]})" for GPU {g.bus_id}')


def plan_locked_mem(host: Host, g: Gpu, bounds: tuple):
    return setting(g, "locked_mem", list(bounds),
                   f'Memory clocks set to "(memClkMin {bounds[0]}, memClkMax {bounds[1]})" for GPU {g.bus_id}')


def plan_deferred_mem(host: Host, g: Gpu, clock: int):
    if clock not in g.model.memory_clocks():
        return warn(f"Specified memory clock {clock} MHz is not supported for GPU {g.bus_id}. Run "
                    "'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock combinations", RC_INVALID)
    return setting(g, "deferred_mem", clock,
                   f'Deferred memory clocks set to "(memClkMin {clock}, memClkMax {clock})" for GPU {g.bus_id}')


def plan_ecc(host: Host, g: Gpu, want: bool):
    """Pending until the GPU resets (a reboot or nvidia-smi -r): "Reboot required." after the run."""
    return setting(g, "ecc_pending", want, f"{enabled(want)} ECC support for GPU {g.bus_id}.")


def plan_compute_mode(host: Host, g: Gpu, name: str):
    return setting(g, "compute_mode", None if name == "DEFAULT" else name,
                   f"Set compute mode to {name} for GPU {g.bus_id}.")


def plan_mig(host: Host, g: Gpu, want: bool):
    """At once where nothing holds the GPU (Ampere: the driver resets it; Hopper+: no reset needed), else pending
    until a reset or reboot (modes.mig_held); refused while GPU instances exist."""
    verb = "enable" if want else "disable"
    if not g.model.mig:
        return warn(f"Unable to {verb} MIG Mode for GPU {g.bus_id}: Not Supported")
    if g.record.get("gis"):
        return error(f"Unable to {verb} MIG Mode for GPU {g.bus_id}: In use by another client", RC_OTHER)

    def apply() -> Outcome:
        g.record["mig_pending"] = want
        if mig_on(g.record) == want or not mig_held(g.record, host.daemon):
            g.record["mig_on"] = want
            return ok(f"{enabled(want)} MIG Mode for GPU {g.bus_id}")
        return ok(MIG_PENDING.format(state=verb, bus=g.bus_id))
    return apply


def plan_reset(key: str):
    def plan(host: Host, g: Gpu, value) -> Callable:
        return setting(g, key, None)
    return plan


def setting(g: Gpu, key: str, value, *lines: str) -> Callable:
    def apply() -> Outcome:
        g.record[key] = value
        return ok(*lines)
    return apply


def permission(what: str) -> str:
    return f"Failed to {what} for GPU {{bus}}: Insufficient Permissions"


def not_supported(what: str) -> str:
    return f"Setting {what} is not supported for GPU {{bus}}."


MIG_PENDING = ("Warning: MIG mode is in pending {state} state for GPU {bus}:In use by another client\n{bus} is currently "
               "being used by one or more other processes (e.g. CUDA application or a monitoring application such as "
               "another instance of nvidia-smi). Please first kill all processes using the device and retry the "
               "command or reboot the system to make MIG mode effective.")
APP_CLOCKS_DENIED = "The current user does not have permission to change clocks for GPU {bus}."
PM_DENIED = "Unable to set persistence mode for GPU {bus}: Insufficient Permissions"
POWER_UNSUPPORTED = "Changing power management limit is not supported for GPU: {bus}."
SETTERS = {s.option: s for s in (
    Setter("pm", parse_bool, lambda m: True, "", PM_DENIED, plan_persistence, volatile=False),
    Setter("pl", parse_watts, lambda m: True, POWER_UNSUPPORTED, permission("set power management limit"),
           plan_power_limit, volatile=True),
    Setter("ac", parse_pair, lambda m: m.app_clocks, not_supported("applications clocks"), APP_CLOCKS_DENIED,
           plan_app_clocks, volatile=True),
    Setter("rac", no_value, lambda m: m.app_clocks, not_supported("applications clocks"), APP_CLOCKS_DENIED,
           plan_reset("app_clocks"), volatile=False),
    Setter("lgc", parse_range, lambda m: m.locked_gpu_clocks, not_supported("locked GPU clocks"),
           permission("set locked GPU clocks"), plan_locked_gpu, volatile=True),
    Setter("rgc", no_value, lambda m: m.locked_gpu_clocks, not_supported("locked GPU clocks"),
           permission("reset locked GPU clocks"), plan_reset("locked_gpu"), volatile=False),
    Setter("lmc", parse_range, lambda m: m.locked_mem_clocks, not_supported("locked memory clocks"),
           permission("set locked memory clocks"), plan_locked_mem, volatile=True),
    Setter("rmc", no_value, lambda m: m.locked_mem_clocks, not_supported("locked memory clocks"),
           permission("reset locked memory clocks"), plan_reset("locked_mem"), volatile=False),
    Setter("lmcd", parse_clock, lambda m: m.deferred_mem_clocks, not_supported("deferred memory clocks"),
           permission("set deferred memory clocks"), plan_deferred_mem, volatile=False),
    Setter("rmcd", no_value, lambda m: m.deferred_mem_clocks, not_supported("deferred memory clocks"),
           permission("reset deferred memory clocks"), plan_reset("deferred_mem"), volatile=False),
    Setter("e", parse_bool, lambda m: m.ecc_mode is not None, not_supported("ECC mode"),
           permission("set ECC mode"), plan_ecc, volatile=False, after="Reboot required."),
    Setter("c", parse_compute_mode, lambda m: True, "", permission("set compute mode"), plan_compute_mode,
           volatile=True),
    Setter("mig", parse_bool, lambda m: True, "", "Unable to set MIG Mode for GPU {bus}: Insufficient Permissions",
           plan_mig, volatile=True),
)}


# -pl --scope 1 (TOTAL_MODULE) is for Grace Hopper: refused on every model here.
MODULE_POWER = Setter("pl", no_value, lambda m: False, POWER_UNSUPPORTED, "", plan_power_limit, volatile=False)


def run_setter(host: Host, gpus: list, setter: Setter, value, error_on_warning: bool) -> tuple:
    """Each GPU in turn; a warning moves on, an error stops. Returns (output, rc)."""
    out, warned, done = [], RC_OK, False
    for g in gpus:
        outcome = one_gpu(host, g, setter, value)
        out += outcome.lines
        if outcome.kind == "error":
            return "\n".join(out + [TERMINATING]) + "\n", outcome.rc
        if outcome.kind == "warn":
            warned = warned or outcome.rc
            continue
        done = True
        if setter.volatile and not g.persistent:
            out.append(PERSISTENCE_WARNING.format(bus=g.bus_id))
    closing = [ALL_DONE, setter.after] if setter.after and done else [ALL_DONE]
    return "\n".join(out + closing) + "\n", warned if error_on_warning else RC_OK


def one_gpu(host: Host, g: Gpu, setter: Setter, value) -> Outcome:
    if not setter.supported(g.model):
        return warn(setter.unsupported.format(bus=g.bus_id))
    planned = setter.plan(host, g, value)
    if isinstance(planned, Outcome):  # nothing to do, or refused before any permission check
        return planned
    if effective_uid() != 0:
        return error(setter.denied.format(bus=g.bus_id), RC_NO_PERMISSION)
    return planned()

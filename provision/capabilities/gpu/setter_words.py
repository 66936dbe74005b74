"""What nvidia-smi's setters say when they do not set (-pm, -pl, -ac, -lgc, -lmc, ...), in words that say what it
means and what to do: apply and the ad-hoc commands show this instead of only "power limit reads X W, not Y W".

The messages, as real drivers print them (../shared/real-outputs/setter-errors; the simulator's setters.py):
- "Setting applications clocks is not supported for GPU 0000:01:00.0." then "Treating as warning and moving
  on." and "All done.", exit 0 (GTX 1070, driver 375.66): a GeForce card; -eow makes it an error;
- 'Specified clock combination "(MEM 715, SM 111)" is not supported for GPU 00000002:01:00.0. Run ...' (P100);
- "Provided power limit 10.00 W is not a valid power limit which should be between 100.00 W and 242.00 W for
  GPU 00000000:29:00.0" then "Terminating early due to previous errors." (RTX 3070);
- "Changing power management limit is not supported for GPU: 00000000:01:00.0." then "Treating as warning and
  moving on." (an RTX 4080 Laptop GPU, Dreaming-Codes/nvidia_oc PR #22; NVIDIA/open-gpu-kernel-modules issue #483):
  a limit its firmware fixes; "... not supported in current scope for GPU: ..." elsewhere;
- "Failed to set power management limit for
  GPU ...: Insufficient Permissions", "Unable to set persistence mode for GPU ...: Insufficient Permissions",
  "The current user does not have permission to change clocks for GPU ..." (drivers 5xx; in a container
  without the host's privileges nvidia-smi answers the same way).
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"should be between ([\d.]+) W and ([\d.]+) W")
_MOVING_ON = "Treating as warning and moving on."
_LOST = ("GPU is lost", "Unable to determine the device handle", "GPU requires reset")


def explain(said: str) -> str | None:
    """What the setter's words mean and the next step, then nvidia-smi's own line; None when they say nothing
    provision can add to (its caller then shows them as they are)."""
    meaning = _meaning(said)
    if meaning is None:
        return None
    lines = [line.strip().strip("`") for line in said.splitlines()]
    quoted = next((line.rpartition("`")[2].lstrip(": ").removeprefix("exited ") for line in lines
                   if line and not line.startswith((_MOVING_ON, "Terminating early", "All done"))), "")
    quoted = re.sub(r"^-?\d+: ", "", quoted)  # "`nvidia-smi ...` exited 4: Failed to ..." -> "Failed to ..."
    return f"{meaning} (nvidia-smi: {quoted})" if quoted else meaning


def _meaning(said: str) -> str | None:
    if any(words in said for words in ("Insufficient Permissions", "does not have permission", "No permission")):
        return ("nvidia-smi may not change this setting here: it needs root on the host itself (inside a "
                "container GPU settings belong to the host: run provision against the host, not the container)")
    if limits := _RANGE.search(said):
        return (f"outside what this GPU accepts ({float(limits[1]):g}..{float(limits[2]):g} W): set provision_gpu.power_limit "
                "within it (provision facts shows each GPU's range, the Min and Max Power Limit of `nvidia-smi -q -d "
                "POWER`)")
    if "power management limit is not supported" in said:
        return ("this GPU's power limit cannot be changed here (its firmware fixes it, as on laptop GPUs; in a VM or "
                "vGPU the host sets it): `nvidia-smi -q -d POWER` shows the range it takes, none where Min and Max "
                "Power Limit read N/A; remove provision_gpu.power_limit for this GPU (provision_gpu.overrides), or "
                "hold its power down with locked clocks (provision_gpu.locked_clocks)")
    if "clock combination" in said and "is not supported" in said:
        return "not a clock pair this GPU supports: pick one from `provision clocks --list` (or use --nearest)"
    if "not supported" in said.lower():
        return ("this GPU or driver does not take this setting (a GeForce card takes locked clocks, not "
                "application clocks: provision_gpu.locked_clocks, `provision clocks --locked`; a vGPU or MIG instance: "
                "set it on the host's whole GPU)")
    if any(words in said for words in _LOST):
        return "the GPU no longer answers: see `provision verify` (a GPU off the bus needs a reset or a reboot)"
    if _MOVING_ON in said:  # a warning with exit 0: nvidia-smi went on without setting it
        return "nvidia-smi warned and left it unchanged"
    return None

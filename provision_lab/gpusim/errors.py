"""How the simulated programs fail: nvidia-smi's exit codes, the messages several of its commands share, and the
simulator's own errors."""

from __future__ import annotations

# --- nvidia-smi's return codes (man page, RETURN VALUE) -----------------------------------------

RC_OK, RC_INVALID, RC_NOT_SUPPORTED, RC_NO_PERMISSION, RC_NOT_FOUND, RC_NO_DRIVER = 0, 2, 3, 4, 6, 9
RC_GPU_LOST = 15  # nvidia-smi(1): "GPU has fallen off the bus or has otherwise become inaccessible"
RC_VERSION_MISMATCH = 18  # nvml.h NVML_ERROR_LIB_RM_VERSION_MISMATCH: what nvidia-smi exits with on it
RC_OTHER = 255  # nvidia-smi(1) "Other error": in use by another client, insufficient resources, ...
RC_SIM = 255  # the simulator itself cannot do what was asked (bad config, unsimulated option)


# --- what the real programs print, in several places -----------------------------------------------

NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.\n\n")
NO_DEVICES = "No devices were found\n"
HELP_HINT = "Please run 'nvidia-smi -h' for help."
INVALID_COMBINATION = f"Invalid combination of input arguments. {HELP_HINT}\n"
BAD_FIELD = 'Field "{name}" is not a valid field to query.\n\n'  # a --query-* field this driver does not know


# --- errors -------------------------------------------------------------------------------------------


class SimError(Exception):
    """The simulator cannot go on (bad config, unsimulated option): a message on stderr, exit 255."""


class Exit(Exception):
    """Stop with this output and return code, as the real program would."""

    def __init__(self, text: str, rc: int):
        super().__init__(text)
        self.text, self.rc = text, rc

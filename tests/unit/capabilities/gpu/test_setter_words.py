"""nvidia-smi's setter messages, real ones and the simulator's, said as what they mean and what to do."""

from __future__ import annotations

import pytest

from provision.capabilities.gpu.setter_words import explain


@pytest.mark.parametrize("name, words", [
    ("setter-errors/gtx1070-6gpu-ac-not-supported.txt", "takes locked clocks, not application clocks"),
    ("setter-errors/p100-4gpu-ac-invalid-combination.txt", "not a clock pair this GPU supports"),
    ("setter-errors/rtx3070-pl-out-of-range.txt", "outside what this GPU accepts (100..242 W)"),
])
def test_real_setter_messages_are_explained(real_output, name, words):
    assert words in explain(real_output(name))


@pytest.mark.parametrize("name", ["setter-errors/p100-4gpu-ac-set-ok.txt",
                                  "setter-errors/p100-4gpu-pm-already-enabled.txt"])
def test_a_setter_that_did_its_job_needs_no_words(real_output, name):
    assert explain(real_output(name)) is None


def test_the_drivers_other_words():
    assert "needs root on the host itself" in explain(
        "Failed to set power management limit for GPU 00000000:01:00.0: Insufficient Permissions\n"
        "Terminating early due to previous errors.")
    assert "needs root" in explain("The current user does not have permission to change clocks for GPU 0000:01:00.0.")
    assert "does not take this setting" in explain("Setting applications clocks is not supported for GPU 0000:01:00.0.")


@pytest.mark.parametrize("said", [
    # an RTX 4080 Laptop GPU (Dreaming-Codes/nvidia_oc PR #22): a warning, exit 0
    "Changing power management limit is not supported for GPU: 00000000:01:00.0.\nTreating as warning and moving on."
    "\nAll done.",
    "Changing power management limit is not supported in current scope for GPU: 0000000F:01:00.0",
])
def test_a_refused_power_limit_is_explained_as_a_power_limit_not_as_clocks(said):
    words = explain(said)
    assert "power limit cannot be changed here" in words and "nvidia-smi -q -d POWER" in words
    assert "remove provision_gpu.power_limit for this GPU" in words and "application clocks" not in words
    assert words.endswith(f"(nvidia-smi: {said.splitlines()[0]})")
    assert "no longer answers" in explain("Unable to determine the device handle for GPU0000:31:00.0: Unknown Error")
    assert explain("Some new warning for GPU 0000:01:00.0.\nTreating as warning and moving on.\nAll done.") == (
        "nvidia-smi warned and left it unchanged (nvidia-smi: Some new warning for GPU 0000:01:00.0.)")
    assert explain("`nvidia-smi -i GPU-1 -pl 250` exited 4: Failed to set power management limit for GPU "
                   "00000000:01:00.0: Insufficient Permissions\nTerminating early due to previous errors.").endswith(
        "(nvidia-smi: Failed to set power management limit for GPU 00000000:01:00.0: Insufficient Permissions)")
    assert explain("All done.") is None

"""The kernel-log checks' verdicts on real published kernel lines (tests/fixtures/kernlog, and
../shared/real-outputs/xid where a test skips without it) and /sys AER counters."""

from __future__ import annotations


import pytest

from builders.facts import facts
from builders.gpus import gpu
from builders.hosts import host
from provision.capabilities.health.facts import AerCounters, KernelLogFacts, PcieFacts
from provision.verify import Node
from provision.capabilities.health import checks_kernel, checks_recovery
from provision.core.checks import REBOOT, RESET
from paths import FIXTURES

from builders.checks import verdict

KERNLOG = FIXTURES / "kernlog"


def real_lines(name: str) -> list[str]:
    return (KERNLOG / name).read_text().split("# ---\n", 1)[1].splitlines()


def node(lines: list[str] | None, bus_ids=(), source: str | None = "dmesg", pcie: PcieFacts | None = None,
         recovery: str | None = None) -> Node:
    v100s = [gpu(i, "V100", bus_id=bus, recovery_action=recovery) for i, bus in enumerate(bus_ids)]
    log = KernelLogFacts(source=source, message="" if source else "dmesg: read kernel buffer failed: Operation "
                                                                    "not permitted", lines=lines or [])
    return Node("rig", host("rig"), facts(gpus=v100s, kernel_log=log, pcie=pcie), [], host=None)


def test_an_uncorrectable_ecc_error_and_a_failed_retirement_fail_with_the_gpu_named():
    rig = node(real_lines("gpu-operator-1146-syslog-xid48-64.txt"), ["00000000:07:00.0", "00000000:0A:00.0"])
    failed = verdict(checks_kernel.check_no_xid_errors_since_boot, rig)
    assert failed.found.startswith("GPU0 0000:07:00 Xid 48 (memory: ")
    assert "; GPU0 0000:07:00 Xid 64 (memory: " in failed.found and "GPU1" not in failed.found
    assert rig.notes == []


def test_application_xids_are_noted_and_pass_and_a_bad_push_buffer_fails():
    lines = real_lines("dxvk-1027-dmesg-raw-xid31-13-32.txt")
    apps_only = [line for line in lines if ": 32," not in line]
    rig = node(apps_only, ["00000000:01:00.0"])
    assert verdict(checks_kernel.check_no_xid_errors_since_boot, rig) is None
    assert any(n.startswith("GPU0 0000:01:00 Xid 13 (application: ") and " x4: an application's fault" in n
               for n in rig.notes)
    failed = verdict(checks_kernel.check_no_xid_errors_since_boot, node(lines, ["00000000:01:00.0"]))
    assert failed.found.startswith("GPU0 0000:01:00 Xid 32 (hardware: ")


def test_a_gpu_fallen_off_the_bus_is_named_from_the_last_good_run_once_per_message(real_output):
    lines = real_output("xid/xid79-fallen-off-bus-syslog-gtx1650ti-mobile.txt").splitlines()  # Xid 79, kernel line
    failed = verdict(checks_kernel.check_no_xid_errors_since_boot, node(lines, ["00000000:01:00.0"]))
    assert failed.found == "GPU0 0000:01:00 Xid 79 (hardware: " + failed.found.split("(hardware: ", 1)[1]
    assert ";" not in failed.found  # the NVRM line without an Xid is the same event
    no_xid = [line for line in real_lines("nvsentinel-155-dmesg-raw-fallen-off-multiline.txt")]
    failed = verdict(checks_kernel.check_no_xid_errors_since_boot, node(no_xid))
    assert failed.found.startswith("0000:b3:00 fallen off the bus (kernel log, no Xid)")


def test_an_unreadable_kernel_log_is_not_applicable_and_says_why():
    with pytest.raises(pytest.skip.Exception, match="Operation not permitted.*NOPASSWD sudo"):
        checks_kernel.check_no_xid_errors_since_boot(node(None, source=None))


def test_aer_reports_on_a_gpu_or_its_port_fail_and_other_devices_do_not():
    lines = real_lines("pop-os-3363-syslog-aer-correctable.txt")  # the port 0000:00:03.1 and nvidia 0000:07:00.0
    pcie = PcieFacts(ports={"0000:07:00.0": "0000:00:03.1"})
    failed = verdict(checks_kernel.check_no_pcie_errors_on_the_gpu_links_since_boot,
                     node(lines, ["00000000:07:00.0"], pcie=pcie))
    assert "the port 0000:00:03 above GPU0: severity=Correctable, type=Data Link Layer, (Transmitter ID): Timeout" \
        in failed.found
    assert "GPU0 0000:07:00: severity=Correctable, type=Data Link Layer, (Transmitter ID): Timeout" in failed.found
    elsewhere = verdict(checks_kernel.check_no_pcie_errors_on_the_gpu_links_since_boot,
                        node(lines, ["00000000:41:00.0"], pcie=PcieFacts(ports={"0000:41:00.0": "0000:40:01.1"})))
    assert elsewhere is None


def test_aer_counters_in_sys_fail_only_when_they_counted_something():
    clean = PcieFacts(ports={"0000:01:00.0": "0000:00:01.0"},
                      aer=[AerCounters("0000:01:00.0", "0000:01:00.0", "correctable", {"RxErr": 0}, 0)])
    check = checks_kernel.check_no_pcie_errors_on_the_gpu_links_since_boot
    assert verdict(check, node([], ["00000000:01:00.0"], pcie=clean)) is None
    riser = PcieFacts(ports={"0000:01:00.0": "0000:00:01.0"},
                      aer=[AerCounters("0000:01:00.0", "0000:00:01.0", "correctable", {"RxErr": 7, "BadTLP": 0}, 7)])
    assert verdict(check, node([], ["00000000:01:00.0"], pcie=riser)).found == \
        "the port 0000:00:01.0 above GPU0: 7 correctable error(s) counted (RxErr 7)"


def test_a_gpu_the_driver_could_not_bring_up_is_a_finding_on_its_bus_id():
    """gpu-operator#1146's node: GPU 0000:0a:00 failed RmInitAdapter again and again; nvidia-smi shows the other."""
    lines = real_lines("gpu-operator-1146-syslog-xid48-64.txt")
    rig = node(lines, ["00000000:07:00.0"])
    failed = verdict(checks_kernel.check_no_gpu_failed_to_initialize, rig)
    assert failed.found == ("0000:0a:00: rm_init_adapter failed, device minor number 5 x4; "
                            "RmInitAdapter failed! (0x24:0x72:1568) x3")
    [finding] = failed.findings
    assert finding.about == ("0000:0a:00",) and finding.because == ("no_gpu_is_lost:0000:0a:00",)
    assert "reseat" in finding.fix
    up_later = node(lines, ["00000000:07:00.0", "00000000:0A:00.0"])  # it came up in the end: nothing missing
    assert verdict(checks_kernel.check_no_gpu_failed_to_initialize, up_later) is None


def test_the_xid_79_of_a_gpu_that_then_failed_to_come_back_leads_to_both_checks():
    lines = real_lines("nvidia-readme-560-knownissues-xid79-pid-only.txt")
    failed = verdict(checks_kernel.check_no_xid_errors_since_boot, node(lines))
    assert failed.findings[0].because == ("no_gpu_is_lost:0000:09:00", "no_gpu_failed_to_initialize:0000:09:00")


def test_an_xid_45_caused_by_an_nvlink_xid_fails_naming_its_cause_under_the_nvlink_checks():
    """open-gpu-kernel-modules#1150: Xid 45 channel cleanups "caused by previous Xid 149/145" on four GPUs are the
    NVLink faults they follow, not an application's: each GPU one finding, led to its NVLink checks."""
    buses = ["00000000:DC:00.0", "00000000:ED:00.0", "00000000:BA:00.0", "00000000:97:00.0"]
    rig = node(real_lines("ogkm-1150-kernel-tag-xid45.txt"), buses)
    failed = verdict(checks_kernel.check_no_xid_errors_since_boot, rig)
    assert rig.notes == []
    assert [f.found.split(" (nvlink: ")[0] for f in failed.findings] == [
        "GPU0 0000:dc:00 Xid 45 caused by Xid 149", "GPU1 0000:ed:00 Xid 45 caused by Xid 145",
        "GPU2 0000:ba:00 Xid 45 caused by Xid 145", "GPU3 0000:97:00 Xid 45 caused by Xid 145"]
    first = failed.findings[0]
    assert first.found == ("GPU0 0000:dc:00 Xid 45 caused by Xid 149 (nvlink: NVLink5 error in the link's NETIR unit "
                           "(link events: a link down, a high bit-error rate); the Xid 149 line says whether it is "
                           "Fatal or Nonfatal.) x2")
    assert first.because == ("no_fatal_nvswitch_error_since_boot", "nvlink_links_are_up_at_speed:0000:dc:00",
                             "nvlink_has_no_errors:0000:dc:00")
    assert first.fix.startswith("Fatal: drain and reset the GPU")


# --- the driver's recovery: Xid 154, NV_ERR_RESET_REQUIRED (forum t/371272, scitix/sichek#51) --------------------


def test_xid_154_is_one_finding_with_the_xid_before_it_and_asks_a_reset():
    """forum t/371272: an Xid 62 (the firmware halted), then Xid 154 "GPU Reset Required": one cause, one reset."""
    rig = node(real_lines("nvidia-forum-371272-no-timestamp-xid62-154.txt"), ["00000000:01:00.0"])
    [finding] = verdict(checks_kernel.check_no_xid_errors_since_boot, rig).findings
    assert finding.found.startswith("GPU0 0000:01:00 Xid 62 (driver: ")
    assert finding.found.endswith("; GPU0 0000:01:00 Xid 154 (the driver asks for a GPU reset)")
    assert finding.remedy == RESET and "nvidia-smi -r" in finding.fix
    assert finding.because == ("no_gpu_awaits_recovery:0000:01:00",)  # the GPU's recovery action, when it fails too


def test_a_gpu_reset_since_its_xid_154_has_only_notes():
    rig = node(real_lines("nvidia-forum-371272-no-timestamp-xid62-154.txt"), ["00000000:01:00.0"], recovery="none")
    assert verdict(checks_kernel.check_no_xid_errors_since_boot, rig) is None
    assert [n.split(" (")[0] + " " + n.rsplit(": ", 1)[1] for n in rig.notes] == [
        "GPU0 0000:01:00 Xid 62 recovered since (the driver asks no recovery for it now)",
        "GPU0 0000:01:00 Xid 154 recovered since (the driver asks no recovery for it now)"]


def test_reset_required_without_a_gpu_is_filed_under_the_recovery_action():
    rig = node(real_lines("sichek-51-dmesg-ctime-reset-required.txt"), ["00000000:01:00.0"], recovery="reset")
    [finding] = verdict(checks_kernel.check_no_xid_errors_since_boot, rig).findings
    assert finding.found == "an unnamed GPU NV_ERR_RESET_REQUIRED (the driver refuses work until the GPU is reset)"
    assert finding.because == ("no_gpu_awaits_recovery",) and finding.remedy == RESET


def test_a_gpu_off_the_bus_asks_a_reboot_and_its_xid_154_joins_it():
    """The lab's gpu-needs-reboot lines (NOTICE-RECOGNISE-wording.md): Xid 79 and its pair from gpud's SXid README's
    node, then the Xid 154 line of NVIDIA/open-gpu-kernel-modules#1134, on one GPU."""
    lines = real_lines("gpud-sxid-readme-dmesg-raw-xid79-sxid20034.txt")[:4] + [
        "NVRM: Xid (PCI:0000:91:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"]
    [finding] = verdict(checks_kernel.check_no_xid_errors_since_boot, node(lines)).findings
    assert finding.remedy == REBOOT and finding.found.endswith("Xid 154 (the driver asks for a node reboot)")
    assert "back on the bus" not in finding.found
    [back] = verdict(checks_kernel.check_no_xid_errors_since_boot, node(lines, ["00000000:91:00.0"])).findings
    assert "GPU0 0000:91:00 Xid 79 (hardware: " in back.found and "fault).), back on the bus now;" in back.found
    assert back.remedy == REBOOT
    assert finding.because == ("no_gpu_awaits_recovery:0000:91:00", "no_gpu_is_lost:0000:91:00",
                               "no_gpu_failed_to_initialize:0000:91:00")


def test_each_xid_finding_names_its_smallest_step():
    memory = verdict(checks_kernel.check_no_xid_errors_since_boot,
                     node(real_lines("gpu-operator-1146-syslog-xid48-64.txt"), ["00000000:07:00.0"]))
    assert [f.remedy for f in memory.findings] == [RESET]
    off_bus = verdict(checks_kernel.check_no_xid_errors_since_boot,
                      node(real_lines("nvidia-readme-560-knownissues-xid79-pid-only.txt")))
    assert [f.remedy for f in off_bus.findings] == [REBOOT]


def test_the_recovery_action_now_is_one_finding_per_action_naming_its_gpus():
    rig = Node("rig", host("rig"), facts(gpus=[gpu(0, "H100", recovery_action="none"),
                                              gpu(1, "H100", recovery_action="reset"),
                                              gpu(2, "H100", recovery_action="reset")]), [], host=None)
    [finding] = verdict(checks_recovery.check_no_gpu_awaits_recovery, rig).findings
    assert finding.found == ("the driver asks for a GPU reset: GPU1 00000000:02:00.0 (reset), "
                             "GPU2 00000000:03:00.0 (reset)")
    assert finding.about == ("0000:02:00", "0000:03:00") and finding.remedy == RESET


@pytest.mark.parametrize("action, result", [("none", None), (None, "skip: this driver reports no recovery action")])
def test_no_recovery_asked_passes_and_an_old_driver_is_not_applicable(action, result):
    rig = Node("rig", host("rig"), facts(gpus=[gpu(0, "H100", recovery_action=action)]), [], host=None)
    outcome = verdict(checks_recovery.check_no_gpu_awaits_recovery, rig)
    assert outcome == result or outcome.startswith(result)


# --- NVSwitch SXid (leptonai/gpud's SXid README: a node's dmesg; NVIDIA/nvtrust#124) ------------------------------


def test_fatal_sxids_are_one_finding_reset_together_and_their_detail_lines_are_not_counted():
    rig = node(real_lines("gpud-sxid-readme-dmesg-raw-xid79-sxid20034.txt"))
    failed = verdict(checks_kernel.check_no_fatal_nvswitch_error_since_boot, rig)
    assert failed.found == ("NVSwitch 0000:06:00 SXid 20034: Fatal, Link 48 LTSSM Fault Up; "
                            "NVSwitch 0000:05:00 SXid 20034: Fatal, Link 63 LTSSM Fault Up; "
                            "NVSwitch 0000:07:00 SXid 20034: Fatal, Link 37 LTSSM Fault Up; "
                            "NVSwitch 0000:05:00 SXid 20034: Fatal, Link 62 LTSSM Fault Up")
    [finding] = failed.findings
    assert finding.remedy == RESET and "without -i" in finding.fix and rig.notes == []


def test_an_always_fatal_sxid_asks_a_reboot():
    """No real capture of an always-fatal SXid was found: gpud's real fatal line with the code the Fabric Manager
    guide lists as always fatal (23001) in its place."""
    line = "[6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 23001, Fatal, Link 48 LTSSM Fault Up"
    [finding] = verdict(checks_kernel.check_no_fatal_nvswitch_error_since_boot, node([line])).findings
    assert finding.remedy == REBOOT


def test_non_fatal_sxids_are_notes():
    rig = node(real_lines("nvtrust-124-dmesg-raw-sxid22013-nonfatal.txt"))
    assert verdict(checks_kernel.check_no_fatal_nvswitch_error_since_boot, rig) is None
    assert rig.notes == [
        "NVSwitch 0000:02:00 SXid 22013: Non-fatal, Link 00 Minion Link DLREQ interrupt: non-fatal, for information",
        "NVSwitch 0000:02:00 SXid 22013: Non-fatal, Link 01 Minion Link DLREQ interrupt: non-fatal, for information"]


# The lab's gpu-reset-required lines (NOTICE-RECOGNISE-wording.md): forum t/371272's Xid 154, sichek#51's refusal.
RESET_REQUIRED = ["NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset "
                  "Required)", *real_lines("sichek-51-dmesg-ctime-reset-required.txt")[1:]]


def test_the_refusal_after_an_xid_154_is_the_same_cause_and_a_reset_ends_both():
    [finding] = verdict(checks_kernel.check_no_xid_errors_since_boot,
                        node(RESET_REQUIRED, ["00000000:01:00.0"], recovery="reset")).findings
    assert finding.found == ("GPU0 0000:01:00 Xid 154 (the driver asks for a GPU reset); GPU0 0000:01:00 "
                             "NV_ERR_RESET_REQUIRED (the driver refuses work until the GPU is reset)")
    assert finding.because == ("no_gpu_awaits_recovery:0000:01:00",) and finding.remedy == RESET
    assert finding.about == ("0000:01:00",)  # the GPU a reset takes
    reset = node(RESET_REQUIRED, ["00000000:01:00.0"], recovery="none")
    assert verdict(checks_kernel.check_no_xid_errors_since_boot, reset) is None and len(reset.notes) == 2


def test_two_gpus_with_driver_faults_are_two_causes_each_naming_its_gpu():
    """gpud's testdata (Xid 119 on 0000:9b:00) and forum t/371272 (Xid 62, 154 on 0000:01:00) in one log: the GSP
    timeouts of one GPU are not the other's halt, and a reset takes each GPU alone."""
    lines = (real_lines("gpud-testdata-dmesg-ctime-xid119.txt")
             + real_lines("nvidia-forum-371272-no-timestamp-xid62-154.txt"))
    rig = node(lines, ["00000000:01:00.0", "00000000:9B:00.0"], recovery="none")
    rig.facts.nvidia.gpus[0].recovery_action = "reset"
    findings = verdict(checks_kernel.check_no_xid_errors_since_boot, rig).findings
    assert [(f.about, f.remedy, f.because) for f in findings] == [
        (("0000:9b:00",), RESET, ()), (("0000:01:00",), RESET, ("no_gpu_awaits_recovery:0000:01:00",))]

"""The driver, from facts to plan: what is loaded and installed, the packages each distribution names, the pinned
version installed, upgraded or downgraded in one apt-get and held, and when a reboot is pending.

The /proc and nvidia-smi lines follow the formats real hosts print (public reports: nix-community/nixGL#186,
#121, #139; zzzhouuu/truenas-nvidia-drivers#19; anderskm/gputil#55 for exit 18), with versions of our own."""

from __future__ import annotations


import pytest

from builders.facts import facts, file
from builders.gpus import gpus
from builders.hosts import host

from provision.capabilities.driver import packages as driver
from provision.core.facts import parse_held
from provision.capabilities.registry import FACTS
from provision.core import facts as gather
from provision.capabilities.driver.facts import parse_driver, upstream
from provision.capabilities.driver.facts import DriverFacts
from provision.core.facts import SystemFacts
from provision.capabilities.host import HostFacts
from provision.capabilities.driver.settings import DriverSettings
from provision.capabilities.system.apt import APT_UPDATE
from provision.inventory.model import Host
from provision.capabilities.host import parse_host_settings
from provision.capabilities.driver.tasks import (
    NOUVEAU_CONF,
    REBUILD_INITRAMFS,
    SOURCE_LIST,
    DriverRepository,
    NouveauBlacklist,
    NvidiaDriver,
)

PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.195.03  Tue Jun 23 08:38:17 UTC 2026"
OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
        "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024")
JETSON = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  35.3.1  Release Build  (buildbrain@mobile)  2023"
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159\n"


# --- facts -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line, version, is_open", [(PROPRIETARY, "570.195.03", False), (OPEN, "580.159.04", True),
                                                    (JETSON, "35.3.1", True)])
def test_the_loaded_version_is_read_from_either_module_format(line, version, is_open):
    found = parse_driver(f"loaded {line}\nsecureboot no-efi\n")
    assert (found.loaded, found.loaded_open, found.secure_boot) == (version, is_open, "no-efi")


def test_installed_packages_held_or_not_and_nothing_loaded():
    found = parse_driver("nouveau\nsecureboot 1\n"
                         "pkg nvidia-driver-580 580.159.04-0ubuntu0.22.04.1 hi \n"
                         "pkg nvidia-utils-580 580.159.04-0ubuntu0.22.04.1 ii \n"
                         "pkg nvidia-driver-570 570.195.03-0ubuntu0.22.04.1 rc \n"
                         "pkg nvidia-driver-575 \tun \n")
    assert found.loaded is None and found.nouveau_loaded and found.secure_boot == "enabled"
    assert found.packages == {"nvidia-driver-580": "580.159.04-0ubuntu0.22.04.1",
                              "nvidia-utils-580": "580.159.04-0ubuntu0.22.04.1"}
    assert found.held == ["nvidia-driver-580"]


def test_held_packages_are_the_hi_ones():
    text = "asked nvidia-driver-580 libcuda1\nnvidia-driver-580 580.159.04-1 hi \nlibcuda1 535.216.01-1 ii \n"
    assert parse_held(text) == ["nvidia-driver-580"]


@pytest.mark.parametrize("debian, version", [("580.159.04-0ubuntu0.22.04.1", "580.159.04"),
                                             ("550.163.01-2", "550.163.01"), ("1:535.216.01-1~deb12u1", "535.216.01"),
                                             ("580.159.04", "580.159.04")])
def test_upstream_version_drops_epoch_and_debian_revision(debian, version):
    assert upstream(debian) == version


def test_nvml_mismatch_is_a_state_of_its_own():
    sections = {"nvidia-smi": gather.Section(0, "/usr/bin/nvidia-smi"), "query-gpu": gather.Section(18, MISMATCH)}
    nvidia = FACTS.parse(sections).nvidia
    assert nvidia.state == "mismatch" and nvidia.exit_code == 18 and "NVML library version: 580.159" in nvidia.message


def test_the_batch_reads_the_driver_and_the_machine_id():
    script = FACTS.script("t0k3n")
    assert "/proc/driver/nvidia/version" in script and "/etc/machine-id" in script and "nouveau" in script


# --- package names -------------------------------------------------------------------------------------------


def wanted(**values) -> DriverSettings:
    return DriverSettings(**{"version": "580.159.04", **values})


@pytest.mark.parametrize("values, os_id, names", [
    ({}, "ubuntu", ["nvidia-headless-580", "nvidia-utils-580"]),
    ({"server": True, "open": True}, "ubuntu", ["nvidia-headless-580-server-open", "nvidia-utils-580-server"]),
    ({"headless": False, "server": True}, "ubuntu", ["nvidia-driver-580-server"]),
    ({}, "debian", ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1"]),
    ({"headless": False}, "debian", ["nvidia-driver"]),
    ({"source": "cuda"}, "ubuntu", ["cuda-drivers-580"]),
    ({"source": "cuda", "open": True}, "debian", ["nvidia-open-580"]),
    ({"packages": ["nvidia-driver-{branch}"]}, "rocky", ["nvidia-driver-580"]),
])
def test_package_names_per_distribution_source_and_flavour(values, os_id, names):
    assert driver.package_names(wanted(**values), os_id) == names


@pytest.mark.parametrize("values, os_id, said", [({}, "rocky", "Debian and Ubuntu only"),
                                                 ({"server": True}, "debian", "no -server driver packages")])
def test_no_default_names_says_what_to_set(values, os_id, said):
    with pytest.raises(ValueError, match=said):
        driver.package_names(wanted(**values), os_id)


def test_pinned_is_the_exact_version_or_the_branch():
    assert driver.is_pinned(wanted(), "580.159.04-0ubuntu1") and not driver.is_pinned(wanted(), "580.95.05-0ubuntu1")
    assert driver.is_pinned(DriverSettings(branch="580"), "580.95.05-1") and not driver.is_pinned(wanted(), None)


# --- settings -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block, said", [
    ({"hold": True}, "version (exact) or branch"),
    ({"version": "580.159.04", "branch": "570"}, "not on branch 570"),
    ({"version": "580.159.04", "source": "local"}, "takes the apt source line"),
    ({"version": "580.159.04", "repository": "deb file:/srv ./"}, "takes the apt source line"),
    ({"version": "580.159.04", "packages": ["nvidia driver"]}, "not a Debian package name"),
    ({"version": "580.159.04", "source": "local", "repository": "http://mirror ./"}, "not a one-line apt source"),
    ({"branch": 580}, "driver.branch"),
])
def test_a_driver_block_that_cannot_be_installed_is_refused(block, said):
    _, problems = parse_host_settings({"driver": block}, "inv.yaml", "host gpu-1")
    assert problems and said in str(problems[0])


# --- reboot pending --------------------------------------------------------------------------------------------


def host_facts(packages=None, loaded=None, state="ok", held=(), nouveau=False, os_id="ubuntu") -> HostFacts:
    """A host with these driver packages installed and this module loaded; nvidia-smi's words are the mismatch's."""
    return facts(system=SystemFacts(os_id=os_id), state=state, message=" ".join(MISMATCH.split()), packages=packages,
                 held=sorted(held), driver=DriverFacts(loaded=loaded, nouveau_loaded=nouveau))


UBUNTU_580 = {"nvidia-headless-580": "580.159.04-0ubuntu1", "nvidia-utils-580": "580.159.04-0ubuntu1"}


@pytest.mark.parametrize("facts, said", [
    (host_facts(UBUNTU_580, loaded="570.195.03"), ["driver 580.159.04 is installed, 570.195.03 is loaded"]),
    (host_facts(UBUNTU_580), ["driver 580.159.04 is installed, no NVIDIA module is loaded"]),
    (host_facts(UBUNTU_580, loaded="570.195.03", state="mismatch"),
     ["driver 580.159.04 is installed, 570.195.03 is loaded (nvidia-smi: Driver/library version mismatch)"]),
    (host_facts(UBUNTU_580, loaded="580.159.04", nouveau=True), ["nouveau is loaded (blacklisted for the next boot)"]),
    (host_facts(UBUNTU_580, loaded="580.159.04"), []),
])
def test_reboot_pending_says_why(facts, said):
    assert driver.reboot_reasons(wanted(), facts) == said


def test_secure_boot_is_named_where_the_module_did_not_load():
    facts = host_facts(UBUNTU_580)
    facts.driver.secure_boot = "enabled"
    (reason,) = driver.reboot_reasons(wanted(), facts)
    assert reason.endswith("no NVIDIA module is loaded; Secure Boot is on: the module loads only if signed with an "
                           "enrolled key (mokutil)")


def test_a_mismatch_is_pending_even_without_a_driver_block():
    (reason,) = driver.reboot_reasons(None, host_facts(state="mismatch", loaded="570.195.03"))
    assert reason.startswith("nvidia-smi: Failed to initialize NVML") and "loaded: 570.195.03" in reason


# --- the plans ----------------------------------------------------------------------------------------------


def node(**values) -> Host:
    """The host with the pinned driver block (`values` change it)."""
    return host("gpu-1", provision_driver=wanted(**values))


def test_a_fresh_host_gets_the_pinned_packages_in_one_apt_get_then_held():
    plan = NvidiaDriver().plan(node(), host_facts(loaded=None))
    (change,) = plan.changes
    install, hold = change.commands
    assert change.prepare == [APT_UPDATE] and hold == ["apt-mark", "hold", "nvidia-headless-580", "nvidia-utils-580"]
    assert install[-2:] == ["nvidia-headless-580=580.159.04-*", "nvidia-utils-580=580.159.04-*"]
    assert {"--allow-downgrades", "--allow-change-held-packages"} <= set(install)
    assert change.before == "not installed" and change.after == "580.159.04, loaded at the next boot"
    installed = host_facts(UBUNTU_580, held=UBUNTU_580)
    assert change.verify(installed) is None
    assert "not at 580.159.04" in change.verify(host_facts({"nvidia-headless-580": "580.95.05-0ubuntu1"}))


def test_the_pinned_version_held_is_a_no_op():
    plan = NvidiaDriver().plan(node(), host_facts(UBUNTU_580, loaded="580.159.04", held=UBUNTU_580))
    assert not plan.changes and [i.target for i in plan.unchanged] == [*UBUNTU_580, " ".join(UBUNTU_580)]


@pytest.mark.parametrize("installed", [
    {"nvidia-headless-580": "580.95.05-0ubuntu1", "nvidia-utils-580": "580.95.05-0ubuntu1"},  # an upgrade
    {"nvidia-headless-580": "580.200.01-0ubuntu1", "nvidia-utils-580": "580.200.01-0ubuntu1"},  # a downgrade
])
def test_another_version_of_the_branch_is_moved_to_the_pinned_one(installed):
    (change,) = NvidiaDriver().plan(node(), host_facts(installed, loaded=upstream(installed["nvidia-utils-580"]))).changes
    assert change.before.startswith("nvidia-headless-580 580.") and change.commands[0][-1] == "nvidia-utils-580=580.159.04-*"


def test_another_branch_installed_is_named_and_its_held_packages_removed_in_the_same_apt_get():
    facts = host_facts(loaded="570.195.03")
    facts.driver.packages = {"nvidia-headless-570": "570.195.03-0ubuntu1", "nvidia-kernel-common-570": "570.195.03-1"}
    facts.driver.held = ["nvidia-headless-570"]
    (change,) = NvidiaDriver().plan(node(), facts).changes
    assert change.before == "not installed (installed: nvidia-headless-570, nvidia-kernel-common-570)"
    assert change.commands[0][-3:] == ["nvidia-headless-580=580.159.04-*", "nvidia-utils-580=580.159.04-*",
                                       "nvidia-headless-570-"]


def test_hold_follows_the_setting():
    (hold,) = NvidiaDriver().plan(node(), host_facts(UBUNTU_580, loaded="580.159.04")).changes
    assert hold.commands == [["apt-mark", "hold", "nvidia-headless-580", "nvidia-utils-580"]]
    (unhold,) = NvidiaDriver().plan(node(hold=False), host_facts(UBUNTU_580, held={"nvidia-utils-580"})).changes
    assert unhold.commands == [["apt-mark", "unhold", "nvidia-utils-580"]] and unhold.verify(host_facts()) is None


def test_a_branch_alone_installs_its_newest_packages():
    plan = NvidiaDriver().plan(host("gpu-1", provision_driver={"branch": "570"}), host_facts())
    assert plan.changes[0].commands[0][-2:] == ["nvidia-headless-570", "nvidia-utils-570"]


def test_cuda_source_needs_nvidias_keyring():
    plan = NvidiaDriver().plan(node(source="cuda"), host_facts())
    assert "cuda-keyring" in plan.failed and not plan.changes
    assert "cuda-keyring" in NvidiaDriver().package_names(node(source="cuda"))


def test_no_driver_block_skips_every_driver_task():
    bare = host("gpu-1")
    for task in (NvidiaDriver(), NouveauBlacklist(), DriverRepository()):
        assert task.plan(bare, host_facts()).skipped == "driver not set"


def test_nouveau_blacklist_rebuilds_the_initramfs_when_written():
    (change,) = NouveauBlacklist().plan(node(), host_facts()).changes
    assert change.write.path == NOUVEAU_CONF and "blacklist nouveau" in change.write.content
    assert change.after_write == [REBUILD_INITRAMFS] and change.after.endswith("initramfs rebuilt")
    written = host_facts()
    written.files[NOUVEAU_CONF] = file(NOUVEAU_CONF, change.write.content)
    assert not NouveauBlacklist().plan(node(), written).changes


def test_a_local_repository_is_one_source_file_then_apt_get_update():
    line = "deb [trusted=yes] file:/srv/provision-lab/apt ./"
    (change,) = DriverRepository().plan(node(source="local", repository=line), host_facts()).changes
    assert change.write.path == SOURCE_LIST and change.write.content.endswith(line + "\n")
    assert change.after_write[0][-1] == "update"
    assert DriverRepository().plan(node(), host_facts()).skipped == "provision_driver.source is distro"


def test_gpu_tasks_wait_for_the_reboot_and_say_so():
    from provision.capabilities.gpu.tasks import PowerLimit
    from provision.capabilities.gpu.layout_task import GpuLayout

    debian = host("gpu-1", provision_driver=wanted(packages=["nvidia-driver-{branch}"]),
                  provision_gpu={"power_limit": 200})
    facts = host_facts({"nvidia-driver-580": "580.159.04-1"}, loaded="570.195.03", state="mismatch", os_id="debian")
    plan = PowerLimit().plan(debian, facts)  # waiting is a state, not a failure: the host says its reboot is pending
    assert not plan.failed and plan.changes == []
    assert plan.skipped == ("provision_gpu.power_limit is set but the GPUs wait for a reboot: driver 580.159.04 is installed, "
                            "570.195.03 is loaded (nvidia-smi: Driver/library version mismatch)")
    fresh = host_facts(state="missing", os_id="debian")
    assert PowerLimit().plan(debian, fresh).skipped == (
        "provision_gpu.power_limit is set but the GPUs wait for driver 580.159.04, which the nvidia-driver task installs "
        "(it loads at the next boot: apply --reboot)")
    assert GpuLayout().plan(debian, fresh).skipped.startswith("cannot read the GPUs: the GPUs wait for driver 580.159.04")


def test_a_driver_that_cannot_drive_the_gpus_is_an_input_error():
    facts = host_facts(UBUNTU_580, loaded="580.159.04", held=UBUNTU_580)
    facts.nvidia.gpus = gpus(4, "V100")
    (open_modules,) = NvidiaDriver().plan(node(open=True), facts).problems
    assert open_modules.startswith("provision_driver.open: the open kernel modules drive Turing and newer GPUs only")
    assert "GPU0 Tesla V100-SXM2-16GB (7.0), GPU1 Tesla V100-SXM2-16GB (7.0) ..." in open_modules
    (branch,) = NvidiaDriver().plan(node(version="590.48.01"), facts).problems
    assert branch.endswith("580 is their last branch")
    facts.nvidia.gpus[0].compute_cap = facts.nvidia.gpus[1].compute_cap = "8.6"  # RTX 3090s: fine
    facts.nvidia.gpus = facts.nvidia.gpus[:2]
    assert not NvidiaDriver().plan(node(open=True, version="590.48.01"), facts).problems

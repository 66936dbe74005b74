"""provision_slurm.containers: enroot and pyxis pinned and held, pyxis's line in the plugin stack as its package ships
it, enroot's paths; slurmd restarted only when its plugin stack or the plugin's package changed since it started;
verify's three checks, each cause one finding."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from builders.checks import checked_node, verdict
from builders.facts import facts as host_facts
from builders.facts import file
from builders.hosts import host

from provision.capabilities.host import HostFacts
from provision.capabilities.slurm import checks_pyxis
from provision.capabilities.slurm.pyxis import (
    ENROOT_DROP_IN, PACKAGES_CHECK, PLUGSTACK_CHECK, PYXIS_DPKG_LIST, PYXIS_SHIPPED_CONF, TMPFILES, includes_drop_ins)
from provision.capabilities.slurm.pyxis_facts import SNIPPET, SLURMD_PID_FILE, SlurmdPlugins, parse_slurmd_plugins
from provision.capabilities.slurm.pyxis_tasks import EnrootPyxis, PyxisPlugstack
from provision.capabilities.slurm.tasks import SlurmDaemons
from provision.capabilities.system.daemons import DaemonProcess
from provision.core.batches import Planned, joins
from provision.core.errors import InputError
from provision.core.facts import FileFacts, SystemFacts
from provision.core.plan import Change, FileWrite
from provision.inventory.load import load_inventory

CONTAINERS = {"enroot": "3.5.0", "pyxis": "0.20.0"}
SLURM = {"controller": "head-1", "containers": CONTAINERS}
PINNED = {"enroot": "3.5.0-1", "enroot+caps": "3.5.0-1", "nvslurm-plugin-pyxis": "0.20.0-1"}
# What pyxis's Makefile writes into its package's pyxis.conf (`make deb`: libdir=/usr/lib/$(DEB_HOST_MULTIARCH)).
SHIPPED = "required /usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so\n"
# Debian's slurm-wlm-basic-plugins ships /etc/slurm/plugstack.conf as this one line.
DEBIAN_PLUGSTACK = "include /etc/slurm/plugstack.conf.d/*.conf\n"
STACK, DROP_IN = "/etc/slurm/plugstack.conf", "/etc/slurm/plugstack.conf.d/pyxis.conf"


def blade(**containers: object):
    return host("blade-1", provision_slurm={**SLURM, "containers": {**CONTAINERS, **containers}})


def installed(packages: dict[str, str] | None = None, held: list[str] | None = None,
              files: dict[str, str | None] | None = None) -> HostFacts:
    """Facts of a node with these packages (default: at the pins), held, and these files (text None: absent)
    besides pyxis's package's conf and Debian's plugstack.conf."""
    packages = PINNED if packages is None else packages
    texts = {PYXIS_SHIPPED_CONF: SHIPPED, STACK: DEBIAN_PLUGSTACK, **(files or {})}
    found = host_facts(packages=dict(packages), files={path: file(path, text) for path, text in texts.items()})
    found.held = sorted(packages) if held is None else held
    return found


def converged() -> HostFacts:
    """A node where both tasks have run: their files as they write them."""
    found = installed()
    for change in PyxisPlugstack().plan(blade(), found).changes:
        assert change.write is not None
        found.files[change.write.path] = file(change.write.path, change.write.content)
    return found


# --- the setting ----------------------------------------------------------------------------------------------


def test_versions_are_quoted_dotted_digits_and_the_errors_say_so(tmp_path):
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("all:\n  hosts:\n    head-1:\n      provision_slurm:\n        controller: head-1\n"
                         "        containers: {enroot: 3.5, pyxis: latest, cap: true}\n")
    with pytest.raises(InputError) as refused:
        load_inventory(inventory)
    said = "\n".join(str(p) for p in refused.value.problems)
    assert "provision_slurm.containers.enroot" in said and "provision_slurm.containers.pyxis" in said
    assert "cap" in said  # a misspelt key is refused, not ignored


def test_enroot_pyxis_install_at_their_pins_in_one_apt_get_each_and_hold():
    plan = EnrootPyxis().plan(blade(), installed(packages={}))
    enroot, pyxis = plan.changes
    assert [c for c in enroot.commands if "install" in c][0][-2:] == ["enroot=3.5.0-*", "enroot+caps=3.5.0-*"]
    assert ["apt-mark", "hold", "enroot", "enroot+caps"] in enroot.commands
    assert [c for c in pyxis.commands if "install" in c][0][-1] == "nvslurm-plugin-pyxis=0.20.0-*"
    assert {enroot.cause, pyxis.cause} == {PACKAGES_CHECK}
    assert enroot.verify(installed()) is None and "not at 3.5.0" in (enroot.verify(installed(packages={})) or "")


def test_packages_at_their_pins_and_held_are_left_alone_and_without_the_setting_skipped():
    assert EnrootPyxis().plan(blade(), installed()).changes == []
    assert EnrootPyxis().plan(blade(caps=False), installed()).changes == []
    unheld = EnrootPyxis().plan(blade(), installed(held=[]))
    assert [c.commands for c in unheld.changes] == [[["apt-mark", "hold", "enroot", "enroot+caps"]],
                                                   [["apt-mark", "hold", "nvslurm-plugin-pyxis"]]]
    plain = host("blade-1", provision_slurm={"controller": "head-1"})
    assert EnrootPyxis().plan(plain, installed()).skipped == "provision_slurm.containers is not set"
    assert EnrootPyxis().package_names(plain) == [] and PyxisPlugstack().file_paths(plain) == []


# --- the plugin stack and enroot's paths -----------------------------------------------------------------------


def test_the_drop_in_holds_the_packages_own_line_and_enroots_paths_are_per_user():
    plan = PyxisPlugstack().plan(blade(), installed())
    written = {c.write.path: c.write.content for c in plan.changes if c.write}
    assert set(written) == {DROP_IN, ENROOT_DROP_IN, TMPFILES}
    assert written[DROP_IN].splitlines()[-1] == SHIPPED.strip()
    assert "ENROOT_DATA_PATH /var/lib/enroot/data/user-$(id -u)" in written[ENROOT_DROP_IN]
    assert "ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)" in written[ENROOT_DROP_IN]
    assert "d /var/lib/enroot/cache 1777 root root -" in written[TMPFILES]
    (tmpfiles,) = [c for c in plan.changes if c.write and c.write.path == TMPFILES]
    assert tmpfiles.after_write == [["systemd-tmpfiles", "--create", TMPFILES]]
    assert {c.cause for c in plan.changes} == {PLUGSTACK_CHECK}


def test_written_files_are_left_alone():
    plan = PyxisPlugstack().plan(blade(), converged())
    assert plan.changes == [] and not plan.failed


def test_without_the_package_the_stack_waits_for_it_and_a_package_without_the_plugin_fails():
    """Before the install (apply --check on a new node) the task waits, as the GPU tasks wait for the driver: the
    packages check says what is missing, once. A package whose shipped line names no plugin is a failure."""
    plan = PyxisPlugstack().plan(blade(), installed(packages={}, files={PYXIS_SHIPPED_CONF: None}))
    assert plan.skipped.startswith("waits for nvslurm-plugin-pyxis") and not plan.failed
    assert plan.changes == []
    plan = PyxisPlugstack().plan(blade(), installed(files={PYXIS_SHIPPED_CONF: "# nothing here\n"}))
    assert "names no spank_pyxis.so" in plan.failed and plan.failed_check == PACKAGES_CHECK
    assert plan.changes == []


def test_a_missing_plugstack_conf_is_written_and_one_without_the_include_is_refused_with_the_line_to_add():
    plan = PyxisPlugstack().plan(blade(), installed(files={STACK: None}))
    assert {c.write.path: c.write.content for c in plan.changes if c.write}[STACK] == DEBIAN_PLUGSTACK
    theirs = PyxisPlugstack().plan(blade(), installed(files={STACK: "optional /opt/x/spank_x.so\n"}))
    assert "add the line `include /etc/slurm/plugstack.conf.d/*.conf`" in theirs.failed
    assert theirs.failed_check == PLUGSTACK_CHECK and not any(c.write and c.write.path == DROP_IN
                                                              for c in theirs.changes)


def test_a_plugstack_conf_that_names_pyxis_itself_gets_no_second_line():
    own = "required /usr/local/lib/slurm/spank_pyxis.so\n"  # pyxis's `make install` (prefix /usr/local)
    plan = PyxisPlugstack().plan(blade(), installed(files={STACK: own}))
    assert not any(c.write and c.write.path == DROP_IN for c in plan.changes)


def test_plugstack_includes_are_read_as_slurm_writes_them():
    assert includes_drop_ins(DEBIAN_PLUGSTACK, "/etc/slurm")
    assert includes_drop_ins('include "/etc/slurm/plugstack.conf.d/*"  # pyxis\n', "/etc/slurm")
    assert not includes_drop_ins("# include /etc/slurm/plugstack.conf.d/*.conf\n", "/etc/slurm")
    assert not includes_drop_ins(DEBIAN_PLUGSTACK, "/etc/slurm-llnl")


# --- slurmd restarted only for what it loads -------------------------------------------------------------------


def slurmd_facts(started: float, **mtimes: float) -> HostFacts:
    found = converged()
    for path, mtime in {STACK: 100.0, DROP_IN: 100.0, PYXIS_DPKG_LIST: 100.0, **mtimes}.items():
        found.files[path] = FileFacts(path, True, b"", "644", "root", "root", mtime)
    found.units = {"munge.service": "enabled", "slurmd.service": "enabled"}
    found.daemons = {"munged": [DaemonProcess(10, "munge", 50.0)], "slurmd": [DaemonProcess(11, "root", started)]}
    found.system = SystemFacts(systemd_running=True)
    return found


def test_slurmd_restarts_when_its_plugin_stack_or_pyxis_changed_after_it_started_and_only_then():
    assert set(SlurmDaemons().file_paths(blade())) >= {STACK, DROP_IN, PYXIS_DPKG_LIST}
    assert SlurmDaemons().plan(blade(), slurmd_facts(started=200.0)).changes == []
    for changed in (DROP_IN, PYXIS_DPKG_LIST):
        (change,) = SlurmDaemons().plan(blade(), slurmd_facts(started=200.0, **{changed: 300.0})).changes
        assert change.target == "slurmd.service" and f"{changed} changed since it started" in change.before
        assert change.commands == [["systemctl", "restart", "slurmd.service"]]
    plain = host("blade-1", provision_slurm={"controller": "head-1"})
    assert PYXIS_DPKG_LIST not in SlurmDaemons().file_paths(plain)


# --- what slurmd has loaded ------------------------------------------------------------------------------------

# /proc/PID/maps lines as the kernel writes them (proc(5)): one per mapping, the path last.
MAPS_PYXIS = """\
slurmd 4242
/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so
/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so
"""


def test_the_plugins_slurmd_has_mapped_are_read_once_each():
    found = parse_slurmd_plugins(MAPS_PYXIS)
    assert found == SlurmdPlugins(True, ("/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so",))
    assert found.loaded("spank_pyxis.so") and not found.loaded("spank_other.so")
    assert parse_slurmd_plugins("no-slurmd\n") == SlurmdPlugins(False)


@pytest.mark.skipif(not shutil.which("sleep"), reason="needs sleep(1)")
def test_the_snippet_reads_a_running_slurmd_and_says_when_none_runs(tmp_path: Path):
    pid_file = tmp_path / "slurmd.pid"
    snippet = SNIPPET.replace(SLURMD_PID_FILE, str(pid_file))
    assert subprocess.run(["sh", "-c", snippet], capture_output=True, text=True).stdout == "no-slurmd\n"
    fake = tmp_path / "slurmd"  # a process whose comm is slurmd; it maps no plugin
    shutil.copy(shutil.which("sleep") or "", fake)
    proc = subprocess.Popen([str(fake), "30"])
    try:
        pid_file.write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + 5
        while Path(f"/proc/{proc.pid}/comm").read_text().strip() != "slurmd" and time.monotonic() < deadline:
            time.sleep(0.05)
        out = subprocess.run(["sh", "-c", snippet], capture_output=True, text=True).stdout
        assert parse_slurmd_plugins(out) == SlurmdPlugins(True, ())
        pid_file.write_text(f"{os.getpid()}\n")  # a stale pid file naming another process
        out = subprocess.run(["sh", "-c", snippet], capture_output=True, text=True).stdout
        assert out == "no-slurmd\n"
    finally:
        proc.kill()
        proc.wait()


# --- verify ---------------------------------------------------------------------------------------------------


def judged(found: HostFacts, **slurm: object):
    node = checked_node(found, "blade-1", inventory_path="site.yaml", provision_slurm={**SLURM, **slurm})
    return {name: verdict(getattr(checks_pyxis, f"check_{name}"), node) for name in (
        "enroot_and_pyxis_are_the_pinned_versions", "pyxis_is_in_the_plugin_stack", "slurmd_has_loaded_pyxis")}


def test_a_converged_node_passes_all_three():
    found = converged()
    found.slurmd_plugins = parse_slurmd_plugins(MAPS_PYXIS)
    assert set(judged(found).values()) == {None}


def test_each_cause_is_one_finding_with_its_next_step():
    found = converged()
    found.packages["nvslurm-plugin-pyxis"] = "0.19.0-1"
    packages, stack, loaded = judged(found).values()
    assert "nvslurm-plugin-pyxis 0.19.0-1" in packages.found and packages.fix == "provision apply site.yaml --limit blade-1"
    assert stack.startswith("skip: not judged") and loaded.startswith("skip: not judged")

    found = converged()
    del found.files[DROP_IN]
    packages, stack, loaded = judged(found).values()
    assert packages is None and stack.found == f"{DROP_IN} is missing" and loaded.startswith("skip: not judged")

    found = converged()
    found.slurmd_plugins = SlurmdPlugins(True, ())
    packages, stack, loaded = judged(found).values()
    assert (packages, stack) == (None, None)
    assert "has not loaded it" in loaded.found and loaded.fix.startswith("on blade-1: sudo service slurmd restart")
    found.system = SystemFacts(systemd_running=True)
    assert judged(found)["slurmd_has_loaded_pyxis"].fix.startswith("on blade-1: sudo systemctl restart slurmd")

    found.slurmd_plugins = SlurmdPlugins(False)
    assert judged(found)["slurmd_has_loaded_pyxis"].found == "slurmd is not running"


def test_not_judged_without_the_setting_or_slurmd():
    verdicts = judged(converged(), containers=None)
    assert all(v.startswith("skip: the inventory sets no provision_slurm.containers") for v in verdicts.values())
    assert judged(converged(), role="controller")["slurmd_has_loaded_pyxis"] == "skip: not a Slurm compute node (no slurmd)"
    assert judged(converged())["slurmd_has_loaded_pyxis"] == "skip: the running slurmd's plugins were not read"


def test_the_plugin_stack_is_planned_on_the_read_after_the_packages_and_slurmd_after_both():
    installing = [Planned(EnrootPyxis(), [], [Change("nvslurm-plugin-pyxis", "package", "", "")])]
    assert not joins(PyxisPlugstack(), blade(), installing)  # it copies the line the package just installed
    writing = [Planned(PyxisPlugstack(), [], [Change(DROP_IN, "file", "", "", write=FileWrite(DROP_IN, ""))])]
    assert not joins(SlurmDaemons(), blade(), writing)

"""The lab's dkms (provision_lab/dkmsim.py, as the lab's dkms packages ship it: stack_kernels.dkms_script): run as a
program on trees under tmp_path (dkms's own --dkmstree/--sourcetree/--installtree), with NVIDIA's dkms.conf from the
lab's nvidia-dkms package. Its words are dkms's (dell/dkms dkms.in at v2.8.4 and v3.0.10; run_test.sh's expected
outputs), and provision's parser (driver/nextboot.py) reads its status lines and names the fix from them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provision.capabilities.driver import nextboot
from provision_lab import stack_kernels
from provision_lab.layout import DRIVER_VERSION

KERNEL = stack_kernels.NEXT_KERNEL
NEW, OLD = "3.0.10", "2.8.4"
# Real lines of both formats (issues): linux-surface/linux-surface#573 (dkms 2.x), morrownr/rtl8852bu#7 (dkms 3.0.10).
REAL_OLD = "nvidia, 460.91.03, 5.11.0-36-generic, x86_64: installed"
REAL_NEW = "nvidia/535.86.05, 6.5.0-060500rc5-generic, x86_64: installed"


class Node:
    """One dkms release on a tree of its own: /usr/src holding the lab's NVIDIA DKMS source, /lib/modules/KERNEL."""

    def __init__(self, root: Path, version: str):
        self.root, self.script = root, root / "dkms"
        root.mkdir(parents=True, exist_ok=True)
        self.script.write_text(stack_kernels.dkms_script(version))
        source = root / "src" / f"nvidia-{DRIVER_VERSION}"
        source.mkdir(parents=True)
        (source / "dkms.conf").write_text(stack_kernels.DKMS_CONF.replace("@VERSION@", DRIVER_VERSION))
        (root / "modules" / KERNEL).mkdir(parents=True)

    def dkms(self, *argv: str) -> subprocess.CompletedProcess[str]:
        trees = [f"--dkmstree={self.root / 'dkms-tree'}", f"--sourcetree={self.root / 'src'}",
                 f"--installtree={self.root / 'modules'}"]
        return subprocess.run([sys.executable, str(self.script), *argv, *trees], capture_output=True, text=True,
                              timeout=30)

    def headers(self) -> None:
        (self.root / "modules" / KERNEL / "build").mkdir()

    def installed(self) -> list[str]:
        where = self.root / "modules" / KERNEL / "updates" / "dkms"
        return sorted(p.name for p in where.iterdir()) if where.is_dir() else []


@pytest.fixture(params=[NEW, OLD])
def node(request, tmp_path: Path) -> Node:
    return Node(tmp_path, request.param)


def test_both_formats_of_real_status_lines_read_as_provision_reads_them():
    for line in (REAL_OLD, REAL_NEW):
        found = nextboot.parse_dkms_line(line)
        assert found is not None and found.module == "nvidia" and found.state == "installed"


def test_an_added_module_says_so_in_its_release_s_format_and_provision_names_dkms_as_the_fix(tmp_path: Path):
    for version, line in ((NEW, f"nvidia/{DRIVER_VERSION}: added"), (OLD, f"nvidia, {DRIVER_VERSION}: added")):
        node = Node(tmp_path / version, version)
        assert node.dkms("add", "-m", "nvidia", "-v", DRIVER_VERSION).returncode == 0
        status = node.dkms("status").stdout
        assert status == line + "\n"
        boot = nextboot.parse_nextboot(f"vmlinuz {KERNEL}\nheaders {KERNEL}\ndkms {status}")
        assert boot.dkms[0].kernel is None
        assert nextboot.fix_for(boot, KERNEL) == f"`dkms autoinstall -k {KERNEL}` (the driver is a DKMS module)"


def test_add_prints_what_each_release_prints(tmp_path: Path):
    new, old = Node(tmp_path / NEW, NEW), Node(tmp_path / OLD, OLD)
    link, source = f"nvidia/{DRIVER_VERSION}/source", f"nvidia-{DRIVER_VERSION}"
    assert new.dkms("add", f"nvidia/{DRIVER_VERSION}").stdout == \
        f"Creating symlink {new.root}/dkms-tree/{link} -> {new.root}/src/{source}\n"
    assert old.dkms("add", f"nvidia/{DRIVER_VERSION}").stdout == \
        f"\nCreating symlink {old.root}/dkms-tree/{link} ->\n                 {old.root}/src/{source}\n\nDKMS: add completed.\n"
    again = new.dkms("add", f"nvidia/{DRIVER_VERSION}")
    assert again.returncode == 3 and again.stderr.startswith(f"Error! DKMS tree already contains: nvidia-{DRIVER_VERSION}")


def test_autoinstall_without_the_kernel_s_headers_fails_in_dkms_s_words(tmp_path: Path):
    new, old = Node(tmp_path / NEW, NEW), Node(tmp_path / OLD, OLD)
    for node in (new, old):
        node.dkms("add", "-m", "nvidia", "-v", DRIVER_VERSION)
    failed = new.dkms("autoinstall", "-k", KERNEL)
    assert failed.returncode == 11 and failed.stderr == (
        f"Error! Your kernel headers for kernel {KERNEL} cannot be found at /lib/modules/{KERNEL}/build or "
        f"/lib/modules/{KERNEL}/source.\nPlease install the linux-headers-{KERNEL} package or use the "
        "--kernelsourcedir option to tell DKMS where it's located.\n"
        "Error! One or more modules failed to install during autoinstall.\nRefer to previous errors for more "
        "information.\n")
    assert old.dkms("install", "-m", "nvidia", "-v", DRIVER_VERSION, "-k", KERNEL).stderr == (
        f"Error! Your kernel headers for kernel {KERNEL} cannot be found.\nPlease install the linux-headers-{KERNEL} "
        "package,\nor use the --kernelsourcedir option to tell DKMS where it's located\n")
    assert new.installed() == [] and new.dkms("status").stdout == f"nvidia/{DRIVER_VERSION}: added\n"


def test_autoinstall_with_the_headers_builds_and_installs_every_module_of_the_conf_and_then_has_nothing_to_do(node):
    node.dkms("add", "-m", "nvidia", "-v", DRIVER_VERSION)
    node.headers()
    done = node.dkms("autoinstall", "-k", KERNEL)
    assert done.returncode == 0, done.stderr
    modules = ["nvidia-drm.ko", "nvidia-modeset.ko", "nvidia-peermem.ko", "nvidia-uvm.ko", "nvidia.ko"]
    assert node.installed() == modules
    assert f"   - Installing to {node.root}/modules/{KERNEL}/updates/dkms/\n" in done.stdout
    assert "Building module:\n" in done.stdout and "\nnvidia.ko:\nRunning module version sanity check.\n" in done.stdout
    (line,) = node.dkms("status").stdout.splitlines()
    found = nextboot.parse_dkms_line(line)
    assert found == nextboot.DkmsModule("nvidia", DRIVER_VERSION, KERNEL, "installed")
    assert line.startswith("nvidia/" if node.script.read_text().count(f'VERSION = "{NEW}"') else "nvidia, ")
    again = node.dkms("autoinstall", "-k", KERNEL)
    assert again.returncode == 0 and again.stdout == ""
    boot = nextboot.parse_nextboot(f"vmlinuz {KERNEL}\n" + "".join(
        f"module {KERNEL} /lib/modules/{KERNEL}/updates/dkms/{name}\n" for name in modules))
    assert nextboot.stranded(boot, "nvidia") is None and nextboot.stranded(boot, "nvidia-peermem") is None


def test_remove_all_uninstalls_it_from_every_kernel_and_the_tree(node):
    node.dkms("add", "-m", "nvidia", "-v", DRIVER_VERSION)
    node.headers()
    node.dkms("install", "-m", "nvidia", "-v", DRIVER_VERSION, "-k", KERNEL)
    removed = node.dkms("remove", "-m", "nvidia", "-v", DRIVER_VERSION, "--all")
    assert removed.returncode == 0, removed.stderr
    assert "Before uninstall, this module version was ACTIVE on this kernel.\n" in removed.stdout
    assert removed.stdout.endswith(f"Deleting module nvidia-{DRIVER_VERSION} completely from the DKMS tree.\n")
    assert node.installed() == [] and node.dkms("status").stdout == ""


def test_its_version_and_arguments_as_dkms_takes_them(node):
    assert node.dkms("--version").stdout.strip() in {f"dkms-{NEW}", f"dkms-{OLD}"}
    assert node.dkms("autoinstall", "-k", KERNEL, "-k", KERNEL).returncode == 4
    assert node.dkms("autoinstall", "--all").stderr == \
        "Error! The action autoinstall does not support the --all parameter.\n"
    assert node.dkms("frobnicate").returncode == 4

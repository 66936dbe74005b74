#!/usr/bin/python3
"""dkms in a lab node (the lab's `dkms` package installs this file as /usr/sbin/dkms; the node's python3, stdlib only).

What provision reads and names of dkms, with dkms's own command line, files and words (dell/dkms: dkms.in at the
tags of the two releases below; its run_test.sh holds the expected outputs):

  dkms add -m M -v V | add M/V            registers /usr/src/M-V (its dkms.conf): /var/lib/dkms/M/V/source
  dkms build|install -m M -v V -k K       builds the modules dkms.conf names for kernel K (its headers,
                                          /lib/modules/K/build or /source, must be there: else dkms's error),
                                          install copies them to /lib/modules/K/updates/dkms/ (Debian's place)
  dkms autoinstall -k K                   install, for K, the newest version of every added module whose
                                          dkms.conf says AUTOINSTALL="yes" and that is not installed there
  dkms remove -m M -v V --all             uninstalls it from every kernel and deletes it from the tree
  dkms status [-m M] [-v V] [-k K]        one line per module version (and kernel, once built): before 2.8.7
                                          "nvidia, 570.86.15, 6.1.0-40-amd64, x86_64: installed", since
                                          "nvidia/570.86.15, 6.1.0-40-amd64, x86_64: installed"
  dkms --version                          "dkms-VERSION"

A build here compiles nothing: each module file says which module, version and kernel it is. The lab's dkms ships
no /etc/kernel hooks, so a kernel and its headers installed later get no module until `dkms autoinstall -k K` (as
on a host where the hook's build failed): the state the lab's kernel faults set up (stack_kernels.py).
--dkmstree, --sourcetree and --installtree move the three trees, as dkms's own options do.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from typing import TextIO

VERSION = "3.0.10"  # the lab's package sets it (stack_kernels.dkms_script): Debian bookworm's; bullseye had 2.8.4
ARCH = os.uname().machine
DEST = "/updates/dkms"  # where Debian's and Ubuntu's dkms install every module (their DEST_MODULE_LOCATION override)
CONF_LINE = re.compile(r"^\s*([A-Z_]+)(?:\[(\d+)\])?=(.*)$")


class DkmsError(Exception):
    """dkms's die: its exit code and lines, printed after "Error! " on stderr."""

    def __init__(self, code: int, *lines: str):
        super().__init__(lines[0] if lines else "")
        self.code, self.lines = code, lines


def new_dialect() -> bool:
    """dkms 2.8.7 and later: "module/version" in status lines, and the 3.x wording elsewhere."""
    return tuple(int(part) for part in re.findall(r"\d+", VERSION)[:3]) >= (2, 8, 7)


@dataclass
class Trees:
    dkms: str = "/var/lib/dkms"
    source: str = "/usr/src"
    install: str = "/lib/modules"


@dataclass
class Conf:
    """What dkms.conf says that this dkms uses."""

    name: str
    version: str
    modules: list[str] = field(default_factory=list)  # BUILT_MODULE_NAME[n], in n's order
    autoinstall: bool = False
    make: str = "make"


def read_conf(path: str) -> Conf:
    values: dict[str, str] = {}
    modules: dict[int, str] = {}
    with open(path) as fh:
        for line in fh:
            match = CONF_LINE.match(line)
            if not match:
                continue
            key, index, words = match[1], match[2], shlex.split(match[3], comments=True)
            value = words[0] if words else ""
            if key == "BUILT_MODULE_NAME":
                modules[int(index or 0)] = value
            elif index is None or index == "0":
                values[key] = value
    return Conf(values.get("PACKAGE_NAME", ""), values.get("PACKAGE_VERSION", ""),
                [modules[n] for n in sorted(modules)], values.get("AUTOINSTALL", "").lower() == "yes",
                values.get("MAKE", "make"))


class Dkms:
    def __init__(self, trees: Trees, out: TextIO = sys.stdout):
        self.trees, self.out = trees, out

    def say(self, *lines: str) -> None:
        for line in lines:
            print(line, file=self.out)

    # --- the tree ------------------------------------------------------------------------------------

    def version_dir(self, module: str, version: str) -> str:
        return os.path.join(self.trees.dkms, module, version)

    def added(self) -> list[tuple[str, str]]:
        """(module, version) of every added module, as dkms lists its tree."""
        found = []
        for module in sorted(os.listdir(self.trees.dkms)) if os.path.isdir(self.trees.dkms) else []:
            for version in sorted(os.listdir(os.path.join(self.trees.dkms, module))):
                if os.path.exists(os.path.join(self.version_dir(module, version), "source", "dkms.conf")):
                    found.append((module, version))
        return found

    def conf(self, module: str, version: str) -> Conf:
        path = os.path.join(self.version_dir(module, version), "source", "dkms.conf")
        if not os.path.exists(path):
            raise DkmsError(4, "Could not locate dkms.conf file.", f"File: {path} does not exist.")
        return read_conf(path)

    def built_dir(self, module: str, version: str, kernel: str) -> str:
        return os.path.join(self.version_dir(module, version), kernel, ARCH, "module")

    def built_kernels(self, module: str, version: str) -> list[str]:
        top = self.version_dir(module, version)
        return sorted(k for k in os.listdir(top) if os.path.isdir(os.path.join(top, k, ARCH, "module")))

    def installed(self, module: str, version: str, kernel: str) -> bool:
        """Every built module file is the one under the kernel's tree (dkms compares them too)."""
        built = self.built_dir(module, version, kernel)
        if not os.path.isdir(built):
            return False
        for name in sorted(os.listdir(built)):
            target = os.path.join(self.trees.install, kernel) + f"{DEST}/{name}"
            try:
                with open(os.path.join(built, name), "rb") as a, open(target, "rb") as b:
                    if a.read() != b.read():
                        return False
            except OSError:
                return False
        return True

    # --- actions -------------------------------------------------------------------------------------

    def add(self, module: str, version: str) -> None:
        source = os.path.join(self.trees.source, f"{module}-{version}")
        if not os.path.exists(os.path.join(source, "dkms.conf")):
            raise DkmsError(2, "Could not find module source directory.", f"Directory: {source} does not exist.")
        link = os.path.join(self.version_dir(module, version), "source")
        if os.path.exists(link):
            raise DkmsError(3, f"DKMS tree already contains: {module}-{version}",
                            "You cannot add the same module/version combo more than once.")
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(source, link)
        if new_dialect():
            self.say(f"Creating symlink {link} -> {source}")
        else:
            self.say("", f"Creating symlink {link} ->", f"                 {source}", "", "DKMS: add completed.")

    def headers(self, kernel: str) -> None:
        tree = os.path.join(self.trees.install, kernel)
        if os.path.isdir(os.path.join(tree, "build")) or os.path.isdir(os.path.join(tree, "source")):
            return
        if new_dialect():
            raise DkmsError(1, f"Your kernel headers for kernel {kernel} cannot be found at "
                               f"/lib/modules/{kernel}/build or /lib/modules/{kernel}/source.",
                            f"Please install the linux-headers-{kernel} package or use the --kernelsourcedir option "
                            "to tell DKMS where it's located.")
        raise DkmsError(1, f"Your kernel headers for kernel {kernel} cannot be found.",
                        f"Please install the linux-headers-{kernel} package,",
                        "or use the --kernelsourcedir option to tell DKMS where it's located")

    def build(self, module: str, version: str, kernel: str) -> None:
        conf = self.conf(module, version)
        built = self.built_dir(module, version, kernel)
        if os.path.isdir(built):
            self.say(f"Module {module}/{version} already built for kernel {kernel} ({ARCH}), skip. "
                     "You may override by specifying --force.")
            return
        self.headers(kernel)
        jobs = str(os.cpu_count() or 1)  # the shell runs MAKE's `nproc`, and dkms's own -j
        make = conf.make.replace("${kernelver}", kernel).replace("`nproc`", jobs)
        if new_dialect():  # Debian's sign-file path (dkms.in prepare_signing), which a lab node has not
            sign = f"/usr/lib/linux-kbuild-{kernel.rsplit('.', 1)[0]}/scripts/sign-file"
            self.say(f"Sign command: {sign}", f"Binary {sign} not found, modules won't be signed", "",
                     "Building module:", "Cleaning build area...",
                     (f"make -j{jobs} KERNELRELEASE={kernel}{make[4:]}" if make.startswith("make") else make) + "...",
                     "Cleaning build area...")
        else:
            self.say("", "Kernel preparation unnecessary for this kernel.  Skipping...", "", "Building module:",
                     "cleaning build area...", f"{make}...", "cleaning build area...", "", "DKMS: build completed.")
        os.makedirs(built)
        for name in conf.modules:
            with open(os.path.join(built, f"{name}.ko"), "w") as fh:
                fh.write(f"simulated {name} {version} for {kernel} (built by the lab's dkms)\n")

    def install(self, module: str, version: str, kernel: str) -> None:
        if self.installed(module, version, kernel):
            self.say(f"Module {module}/{version} already installed on kernel {kernel} ({ARCH}), skip. "
                     "You may override by specifying --force.")
            return
        self.build(module, version, kernel)
        built = self.built_dir(module, version, kernel)
        where = os.path.join(self.trees.install, kernel) + DEST
        os.makedirs(where, exist_ok=True)
        for name in (f"{built_name}.ko" for built_name in self.conf(module, version).modules):  # dkms.conf's order
            self.say("", f"{name}:", "Running module version sanity check.", " - Original module",
                     "   - No original module exists within this kernel", " - Installation",
                     f"   - Installing to {where}/")
            shutil.copyfile(os.path.join(built, name), os.path.join(where, name))
        if new_dialect():
            self.say("depmod...")
        else:
            self.say("", "depmod...", "", "DKMS: install completed.")

    def autoinstall(self, kernel: str) -> None:
        """The newest added version of each AUTOINSTALL module not installed on the kernel, installed."""
        newest: dict[str, str] = {}
        for module, version in self.added():
            if self.installed(module, version, kernel) or not self.conf(module, version).autoinstall:
                continue
            if module not in newest or version_key(version) > version_key(newest[module]):
                newest[module] = version
        failed = False
        for module, version in sorted(newest.items()):
            try:
                self.install(module, version, kernel)
            except DkmsError as exc:
                error(exc)
                failed = True
        if failed:
            raise DkmsError(11, "One or more modules failed to install during autoinstall.",
                            "Refer to previous errors for more information.")

    def uninstall(self, module: str, version: str, kernel: str) -> None:
        active = self.installed(module, version, kernel)
        self.say(f"Module {module}-{version} for kernel {kernel} ({ARCH}).",
                 "Before uninstall, this module version was ACTIVE on this kernel." if active else
                 "This module version was INACTIVE for this kernel.")
        if not active:
            return
        where = os.path.join(self.trees.install, kernel) + DEST
        for name in sorted(os.listdir(self.built_dir(module, version, kernel))):
            self.say("", f"{name}:", " - Uninstallation", f"   - Deleting from: {where}/", " - Original module",
                     "   - No original module was found for this module on this kernel.",
                     "   - Use the dkms install command to reinstall any previous module version.")
            try:
                os.remove(os.path.join(where, name))
            except FileNotFoundError:
                pass
        self.say("depmod...")

    def remove(self, module: str, version: str, kernels: list[str]) -> None:
        if (module, version) not in self.added():
            raise DkmsError(3, f"The module/version combo: {module}-{version} is not located in the DKMS tree.")
        for kernel in kernels or self.built_kernels(module, version):
            self.uninstall(module, version, kernel)
            shutil.rmtree(os.path.join(self.version_dir(module, version), kernel), ignore_errors=True)
        if not kernels:
            shutil.rmtree(self.version_dir(module, version))
            self.say(f"Deleting module {module}-{version} completely from the DKMS tree.")

    def status(self, module: str | None, version: str | None, kernels: list[str]) -> None:
        sep = "/" if new_dialect() else ", "
        for m, v in self.added():
            if (module and m != module) or (version and v != version):
                continue
            built = [k for k in self.built_kernels(m, v) if not kernels or k in kernels]
            if not built:
                self.say(f"{m}{sep}{v}: added")
            for k in built:
                self.say(f"{m}{sep}{v}, {k}, {ARCH}: {'installed' if self.installed(m, v, k) else 'built'}")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def error(exc: DkmsError) -> None:
    print("Error! " + "\n".join(exc.lines), file=sys.stderr)


@dataclass
class Args:
    action: str = ""
    module: str | None = None
    version: str | None = None
    kernels: list[str] = field(default_factory=list)
    all: bool = False
    trees: Trees = field(default_factory=Trees)


def parse(argv: list[str]) -> Args:
    args, words = Args(), list(argv)
    tree_options = {"--dkmstree": "dkms", "--sourcetree": "source", "--installtree": "install"}
    while words:
        word = words.pop(0)
        name, eq, value = word.partition("=")
        if name in ("-m", "-v", "-k", *tree_options) and not eq:
            if not words:
                raise DkmsError(1, f"Option {name} requires an argument.")
            value = words.pop(0)
        if name == "-m":
            args.module, slash, version = value.partition("/")
            args.version = version if slash else args.version
        elif name == "-v":
            args.version = value
        elif name == "-k":
            args.kernels.append(value.split("/")[0])
        elif name in tree_options:
            setattr(args.trees, tree_options[name], value)
        elif word == "--all":
            args.all = True
        elif word in ("--force", "-q", "--quiet"):
            continue
        elif not args.action:
            args.action = word
        elif "/" in word:
            args.module, _, args.version = word.partition("/")
        else:
            raise DkmsError(5, f"Unknown option: {word}")
    return args


def run(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(f"dkms-{VERSION}")
        return 0
    try:
        args = parse(argv)
        dkms = Dkms(args.trees)
        kernels = args.kernels or [os.uname().release]
        if args.action == "status":
            dkms.status(args.module, args.version, args.kernels)
        elif args.action == "autoinstall":
            if args.all:
                raise DkmsError(5, "The action autoinstall does not support the --all parameter.")
            if len(kernels) > 1:
                raise DkmsError(4, "The action autoinstall does not support multiple kernel version parameters "
                                   "on the command line.")
            dkms.autoinstall(kernels[0])
        elif args.action in ("add", "build", "install", "remove"):
            if not args.module or not args.version:
                raise DkmsError(1, "Invalid number of arguments passed.",
                                f"Usage: {args.action} <module>/<module-version> or",
                                f"       {args.action} -m <module>/<module-version> or",
                                f"       {args.action} -m <module> -v <module-version>")
            if args.action == "add":
                dkms.add(args.module, args.version)
            elif args.action == "remove":
                dkms.remove(args.module, args.version, [] if args.all else kernels)
            else:
                for kernel in kernels:
                    getattr(dkms, args.action)(args.module, args.version, kernel)
        else:
            raise DkmsError(4, f"Unknown action specified: \"{args.action}\"" if args.action else
                            "No action was specified.")
    except DkmsError as exc:
        error(exc)
        return exc.code
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

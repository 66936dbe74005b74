"""Container jobs under Slurm (provision_slurm.containers): NVIDIA's enroot and its SPANK plugin pyxis, so that
`srun --container-image=IMAGE` runs a task in a container on the nodes.

What NVIDIA documents, and provision follows:
- enroot comes as `enroot` and `enroot+caps` (the capabilities that let unprivileged users import images),
  both at one version (NVIDIA/enroot doc/installation.md).
- pyxis has no prebuilt package: a site builds `nvslurm-plugin-pyxis` with `make deb` against the Slurm it runs
  ("Compiling against spank.h from a different Slurm release will cause Slurm to prevent pyxis from loading with
  error Incompatible plugin version", NVIDIA/pyxis README) and serves it from its own apt repository. The package
  puts the plugin in /usr/lib/<multiarch>/slurm/ and its plugstack line in /usr/share/pyxis/pyxis.conf; the site
  links that into plugstack.conf.d and restarts slurmd. Since srun loads the plugin too, it belongs on every
  node of the cluster, login and controller nodes included.
- enroot reads /etc/enroot/enroot.conf, then /etc/enroot/enroot.conf.d/*.conf (enroot's conf/enroot.conf.d/README).
  enroot.conf is the package's conffile, so provision writes a drop-in and never edits it. Its paths default to
  the XDG directories, which a Slurm job often lacks (no XDG_RUNTIME_DIR) or keeps on a shared home; provision
  sets them under node-local directories every user may create their own folder in.
"""

from __future__ import annotations

from provision.capabilities.driver.pinned import Pin
from provision.core.settings import PATH_RULE, AbsolutePath, Block, setting

VERSION = r"^\d+(\.\d+)+$"
ENROOT_PACKAGES = ("enroot",)
ENROOT_CAPS = "enroot+caps"
PYXIS_PACKAGE = "nvslurm-plugin-pyxis"
PYXIS_SHIPPED_CONF = "/usr/share/pyxis/pyxis.conf"  # the package's plugstack line (`required PLUGIN`)
PLUGIN = "spank_pyxis.so"
ENROOT_DROP_IN = "/etc/enroot/enroot.conf.d/provision.conf"
TMPFILES = "/etc/tmpfiles.d/provision-enroot.conf"  # the directories, again at every boot (/run is emptied)
# The dpkg file list of the plugin's package: dpkg writes it at every install of that package, while the plugin
# keeps the mtime of its build. slurmd restarted before it was written runs the plugin it loaded then.
PYXIS_DPKG_LIST = f"/var/lib/dpkg/info/{PYXIS_PACKAGE}.list"

# The verify checks that report what the tasks would change (verify files as_intended's findings under them).
PACKAGES_CHECK = "enroot_and_pyxis_are_the_pinned_versions"
PLUGSTACK_CHECK = "pyxis_is_in_the_plugin_stack"


class SlurmContainers(Block):
    """enroot and pyxis on every node of the cluster: `srun --container-image=...`."""

    enroot: str = setting(..., 'enroot\'s version in quotes, e.g. "3.5.0"',
                          "enroot (and enroot+caps) from the node's apt sources, e.g. NVIDIA's release .debs "
                          "in the site's repository", pattern=VERSION, examples=["3.5.0"])
    pyxis: str = setting(..., 'pyxis\'s version in quotes, e.g. "0.20.0"',
                         "nvslurm-plugin-pyxis, built with `make deb` against this cluster's Slurm and served "
                         "by the site's apt repository", pattern=VERSION, examples=["0.20.0"])
    caps: bool = setting(True, "true or false", "enroot+caps too: unprivileged users may import images")
    hold: bool = setting(True, "true or false", "apt-mark hold the packages, so no upgrade moves them")
    data_dir: AbsolutePath = setting(
        "/var/lib/enroot", PATH_RULE, "node-local: containers in DIR/data/user-UID, images in DIR/cache/group-GID")
    runtime_dir: AbsolutePath = setting("/run/enroot", PATH_RULE, "enroot's working files: DIR/user-UID")

    def enroot_pin(self) -> Pin:
        """enroot (and enroot+caps) at one release, any Debian revision (NVIDIA's are "3.5.0-1")."""
        names = (*ENROOT_PACKAGES, *([ENROOT_CAPS] if self.caps else []))
        return Pin("enroot package", names, self.enroot, f"{self.enroot}-*", cause=PACKAGES_CHECK)

    def pyxis_pin(self) -> Pin:
        return Pin("pyxis package", (PYXIS_PACKAGE,), self.pyxis, f"{self.pyxis}-*", cause=PACKAGES_CHECK)

    def package_names(self) -> list[str]:
        return [*self.enroot_pin().names, PYXIS_PACKAGE]

    def enroot_settings(self) -> dict[str, str]:
        """enroot.conf's paths: per user (per group for the image cache, which its members share)."""
        return {"ENROOT_RUNTIME_PATH": f"{self.runtime_dir}/user-$(id -u)",
                "ENROOT_DATA_PATH": f"{self.data_dir}/data/user-$(id -u)",
                "ENROOT_CACHE_PATH": f"{self.data_dir}/cache/group-$(id -g)"}

    def shared_dirs(self) -> list[str]:
        """The directories each user makes a folder in: sticky and world-writable, as /tmp."""
        return [self.runtime_dir, f"{self.data_dir}/data", f"{self.data_dir}/cache"]


def enroot_drop_in(containers: SlurmContainers) -> str:
    """/etc/enroot/enroot.conf.d/provision.conf: enroot.conf's format (NAME VALUE; enroot expands $(...))."""
    lines = [f"{name} {value}" for name, value in containers.enroot_settings().items()]
    return "# Written by provision (provision_slurm.containers): enroot's paths for Slurm container jobs.\n" + \
        "\n".join(lines) + "\n"


def tmpfiles(containers: SlurmContainers) -> str:
    """tmpfiles.d(5): the shared directories made (again) at every boot, mode 1777."""
    return "# Written by provision (provision_slurm.containers): enroot's directories, each user's own below.\n" + \
        "".join(f"d {path} 1777 root root -\n" for path in containers.shared_dirs())


def plugstack_dir(conf_dir: str) -> str:
    return f"{conf_dir}/plugstack.conf.d"


def plugstack_paths(conf_dir: str) -> tuple[str, str]:
    """(plugstack.conf, the drop-in provision writes for pyxis) in Slurm's configuration directory: slurmd and srun
    read plugstack.conf beside slurm.conf (PlugStackConfig's default)."""
    return f"{conf_dir}/plugstack.conf", f"{plugstack_dir(conf_dir)}/pyxis.conf"


def includes_drop_ins(plugstack: str, conf_dir: str) -> bool:
    """Does plugstack.conf include the drop-in directory (Debian's: `include /etc/slurm/plugstack.conf.d/*.conf`)?"""
    folder = plugstack_dir(conf_dir)
    for line in plugstack.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) == 2 and words[0] == "include" and words[1].strip('"') in (f"{folder}/*", f"{folder}/*.conf"):
            return True
    return False


def plugin_lines(text: str) -> list[str]:
    """The plugin lines of a plugstack file (`required|optional PATH [ARGS]`), comments and includes left out."""
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [line for line in lines if line.split(" ", 1)[0] in ("required", "optional")]


def plugin_path(text: str) -> str | None:
    """The path of pyxis's plugin in a plugstack file; None where no line names it."""
    for line in plugin_lines(text):
        words = line.split()
        if len(words) >= 2 and words[1].rsplit("/", 1)[-1] == PLUGIN:
            return words[1]
    return None


def slurmd_reads(conf_dir: str, containers: SlurmContainers | None) -> list[str]:
    """What slurmd must be restarted for when it changed after it started: the plugin stack, and the plugin's
    package (its dpkg file list, written at each install; the plugin file keeps its build's mtime)."""
    return [*plugstack_paths(conf_dir), PYXIS_DPKG_LIST] if containers else []

"""enroot and pyxis in the lab: the packages provision_slurm.containers pins, with a real SPANK plugin.

NVIDIA ships enroot as `enroot` and `enroot+caps` (NVIDIA/enroot doc/installation.md); pyxis has no prebuilt
package: a site builds `nvslurm-plugin-pyxis` with `make deb` against its own Slurm, which puts the plugin in
/usr/lib/<multiarch>/slurm/spank_pyxis.so and its plugstack line in /usr/share/pyxis/pyxis.conf, and depends on
enroot (NVIDIA/pyxis Makefile, debian/). The lab does the same: its pyxis package carries a SPANK plugin compiled
here against the spank.h of the lab image's own Slurm (libslurm-dev, fetched with the image's munge and Slurm into
the repository: aptrepo.DEBIAN_PACKAGES), so the lab's real slurmd loads it ("Incompatible plugin version" otherwise) and the
lab's real srun lists its options once the plugin stack names it. The plugin registers pyxis's main options; given
--container-image it says what pyxis says first ("pyxis: importing docker image: IMAGE") and puts the image in
the task's environment (PYXIS_LAB_IMAGE) instead of starting a container: the task runs on the node itself.

`enroot version` prints the version, as the real one does.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from provision_lab.deb import REVISION, Built, Deb
from provision_lab.system import run

ENROOT_VERSIONS = ("3.4.1", "3.5.0")
PYXIS_VERSIONS = ("0.20.0",)
PLUGIN = "/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so"  # pyxis's `make deb` on amd64 (libdir /usr/lib/$(DEB_HOST_MULTIARCH))
IMAGE_ENV = "PYXIS_LAB_IMAGE"

PLUGIN_SOURCE = r"""/* pyxis (simulated, provision lab): a SPANK plugin with pyxis's options; no container is started. */
#include <stdio.h>
#include <slurm/spank.h>

SPANK_PLUGIN(pyxis, 1);

static char image[4096];

static int set_image(int val, const char *optarg, int remote)
{
    if (optarg == NULL || optarg[0] == '\0')
        return -1;
    snprintf(image, sizeof(image), "%s", optarg);
    return 0;
}

static int accepted(int val, const char *optarg, int remote)
{
    return 0;
}

struct spank_option spank_options[] = {
    {"container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
     "[pyxis] the container image: a docker image as an enroot URI, or a squashfs file on the node", 1, 0, set_image},
    {"container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]", "[pyxis] bind mounts in the container", 1, 0, accepted},
    {"container-workdir", "PATH", "[pyxis] the working directory in the container", 1, 0, accepted},
    {"container-name", "NAME", "[pyxis] the name the container is kept under on the node", 1, 0, accepted},
    SPANK_OPTIONS_TABLE_END
};

/* As pyxis (pyxis_dispatch.c): a slurmd-context callback, for which slurmd keeps the plugin loaded; slurmd drops
 * a plugin without one (Slurm's spank.c: "no callbacks in this context"). */
int slurm_spank_slurmd_exit(spank_t sp, int ac, char **av)
{
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    if (image[0] == '\0')
        return 0;
    fprintf(stderr, "pyxis: importing docker image: %s\n", image);
    return spank_setenv(sp, "PYXIS_LAB_IMAGE", image, 1) == ESPANK_SUCCESS ? 0 : -1;
}
"""

ENROOT_SCRIPT = """#!/bin/sh
# enroot (simulated, provision lab): its version only.
case "$1" in
  version) echo {version} ;;
  *) echo "enroot (provision lab): only 'enroot version' is simulated" >&2; exit 1 ;;
esac
"""


def compiled_plugin(repository: Path) -> bytes:
    """The plugin, compiled (gcc on this machine) against the lab image's own Slurm headers: the libslurm-dev of the
    repository being built, which holds the image's Debian packages (aptrepo.DEBIAN_PACKAGES) by then."""
    (dev,) = repository.glob("libslurm-dev_*.deb")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run(["dpkg-deb", "-x", str(dev), str(work / "dev")])
        (work / "pyxis.c").write_text(PLUGIN_SOURCE)
        run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Werror", "-fPIC", "-shared", f"-I{work / 'dev/usr/include'}",
             "-o", str(work / "spank_pyxis.so"), str(work / "pyxis.c")])
        return (work / "spank_pyxis.so").read_bytes()


def debs() -> list[Deb]:
    """enroot and enroot+caps at each lab version, and pyxis built against the lab's Slurm."""
    enroot = [deb for version in ENROOT_VERSIONS for deb in (
        Deb("enroot", version + REVISION, files={"/usr/bin/enroot": (0o755, ENROOT_SCRIPT.format(version=version))},
            description=f"enroot {version} (simulated, provision lab)"),
        Deb("enroot+caps", version + REVISION, depends=f"enroot (= {version}{REVISION})",
            description=f"enroot {version}'s capabilities for unprivileged imports (simulated, provision lab)"))]
    pyxis = [Deb("nvslurm-plugin-pyxis", version + REVISION, depends="enroot (>= 1.1.0)",
                 files={PLUGIN: (0o644, Built(PLUGIN_SOURCE, compiled_plugin)),
                        "/usr/share/pyxis/pyxis.conf": (0o644, f"required {PLUGIN}\n")},
                 description=f"pyxis {version}: Slurm's container plugin (simulated, provision lab)")
             for version in PYXIS_VERSIONS]
    return [*enroot, *pyxis]

"""Which SPANK plugins the running slurmd has loaded (verify). slurmd loads its plugin stack when it starts and
keeps each plugin with a slurmd-context callback mapped (Slurm's spank.c drops the others: "no callbacks in this
context"); pyxis has one (slurm_spank_slurmd_exit). So a pyxis that slurmd lacks was not in the stack when it
started; a required plugin that fails to load stops slurmd from starting at all."""

from __future__ import annotations

from dataclasses import dataclass

from provision.core.facts import FactSection

SLURMD_PID_FILE = "/run/slurmd.pid"  # slurm.conf's SlurmdPidFile (templates/slurm.conf.j2)


@dataclass(frozen=True)
class SlurmdPlugins:
    """The running slurmd's SPANK plugins (the paths mapped in its memory); running False: no slurmd runs."""

    running: bool
    plugins: tuple[str, ...] = ()

    def loaded(self, name: str) -> bool:
        """Is a plugin of this file name (spank_pyxis.so) loaded?"""
        return any(path.rsplit("/", 1)[-1] == name for path in self.plugins)


# The shell's own read and case: no process. /proc/PID/maps lists each mapped file once per mapping; a pid file
# left by a slurmd that died may name another process now, hence the comm test.
SNIPPET = (f"p=; [ -r {SLURMD_PID_FILE} ] && read -r p < {SLURMD_PID_FILE}; c=; "
           "[ -n \"$p\" ] && [ -r /proc/$p/comm ] && read -r c < /proc/$p/comm; "
           "[ \"$c\" = slurmd ] || { echo no-slurmd; exit 0; }; echo \"slurmd $p\"; "
           "while read -r _ _ _ _ _ f; do case $f in */spank_*.so) echo \"$f\";; esac; done < /proc/$p/maps")
SECTION = FactSection("slurmd-plugins", SNIPPET, read_by=frozenset({"verify"}))


def parse_slurmd_plugins(text: str) -> SlurmdPlugins:
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("slurmd "):
        return SlurmdPlugins(running=False)
    return SlurmdPlugins(running=True, plugins=tuple(dict.fromkeys(line.strip() for line in lines[1:] if line.strip())))

"""Container job checks (provision_slurm.containers), each filed under the one before, so each cause is one finding:
enroot and pyxis at their pinned versions; pyxis in the plugin stack; the running slurmd has loaded it. The
tasks file what they would change under the first two (Change.cause)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from provision.capabilities.slurm.pyxis import (
    PACKAGES_CHECK, PLUGIN, PLUGSTACK_CHECK, PYXIS_SHIPPED_CONF, SlurmContainers, includes_drop_ins, plugin_path,
    plugstack_paths)
from provision.core.checks import ERROR, fail

if TYPE_CHECKING:  # types only
    from provision.capabilities.slurm.settings import SlurmSettings
    from provision.verify.model import Node


def _wanted(node: Node) -> tuple[SlurmSettings, SlurmContainers]:
    slurm = node.inventory.settings.slurm
    if slurm is None or slurm.containers is None:
        pytest.skip("the inventory sets no provision_slurm.containers for this host")
    return slurm, slurm.containers


def _misses(node: Node, containers: SlurmContainers) -> str | None:
    facts = node.facts
    return next(filter(None, (pin.misses(facts.packages, facts.held, containers.hold)
                              for pin in (containers.enroot_pin(), containers.pyxis_pin()))), None)


def _stack_problem(node: Node, conf_dir: str) -> str | None:
    """Why the plugin stack names no pyxis plugin; None when it does."""
    files = node.facts.files
    stack, drop_in = plugstack_paths(conf_dir)
    text = {path: (files[path].text if path in files else None) for path in (stack, drop_in)}
    if text[stack] is not None and plugin_path(text[stack] or ""):
        return None
    if text[stack] is None:
        return f"{stack} is missing"
    if not includes_drop_ins(text[stack] or "", conf_dir):
        return f"{stack} does not include {drop_in.rsplit('/', 1)[0]}"
    if text[drop_in] is None or plugin_path(text[drop_in] or "") is None:
        return f"{drop_in} is missing" if text[drop_in] is None else f"{drop_in} names no {PLUGIN}"
    return None


def check_enroot_and_pyxis_are_the_pinned_versions(node: Node) -> None:
    """Reads: provision_slurm.containers (enroot, pyxis, caps, hold); enroot's and pyxis's packages dpkg has
    installed, and held.
    Next step: `provision apply INVENTORY --limit NODE` (installs them at the pinned versions and holds them; pyxis
    comes from the site's apt repository, built with `make deb` against this cluster's Slurm)."""
    _, containers = _wanted(node)
    missing = _misses(node, containers)
    if missing:
        fail(f"enroot {containers.enroot}, pyxis {containers.pyxis}" + (", held" if containers.hold else ""), missing,
             node.apply_command(), severity=ERROR)


def check_pyxis_is_in_the_plugin_stack(node: Node) -> None:
    """Reads: provision_slurm.containers and .conf_dir; plugstack.conf and plugstack.conf.d/pyxis.conf there
    (srun and slurmd load the plugins they name).
    Next step: `provision apply INVENTORY --limit NODE` (writes pyxis's line as its package ships it in
    /usr/share/pyxis/pyxis.conf); where plugstack.conf is the site's own, add `include CONF_DIR/plugstack.conf.d/*.conf`."""
    slurm, containers = _wanted(node)
    if _misses(node, containers):
        pytest.skip(f"not judged while the packages are not the pinned ones ({PACKAGES_CHECK} says why)")
    problem = _stack_problem(node, slurm.conf_dir)
    if problem:
        fail(f"pyxis's plugin in the plugin stack ({PYXIS_SHIPPED_CONF})", problem, node.apply_command(), severity=ERROR)


def check_slurmd_has_loaded_pyxis(node: Node) -> None:
    """Reads: provision_slurm.containers and .role; the SPANK plugins the running slurmd has mapped
    (/proc/PID/maps of /run/slurmd.pid): slurmd loads the plugin stack when it starts.
    Next step: on the node `sudo systemctl restart slurmd` (apply restarts it where the plugin stack or pyxis's
    package changed after it started); a slurmd that does not start again logs why in /var/log/slurm/slurmd.log
    ("Incompatible plugin version": pyxis built against another Slurm)."""
    slurm, containers = _wanted(node)
    if not slurm.runs_jobs(node.name):
        pytest.skip("not a Slurm compute node (no slurmd)")
    if _misses(node, containers) or _stack_problem(node, slurm.conf_dir):
        pytest.skip(f"not judged while pyxis is not installed and in the plugin stack ({PACKAGES_CHECK}, "
                    f"{PLUGSTACK_CHECK} say why)")
    found = node.facts.slurmd_plugins
    if found is None:
        pytest.skip("the running slurmd's plugins were not read")
    restart = "sudo systemctl restart slurmd" if node.facts.system.systemd_running else "sudo service slurmd restart"
    if not found.running:
        fail(f"slurmd running with {PLUGIN} loaded", "slurmd is not running",
             f"on {node.name}: {restart}; if it stops again, /var/log/slurm/slurmd.log says why", severity=ERROR)
    if not found.loaded(PLUGIN):
        fail(f"slurmd running with {PLUGIN} loaded", "slurmd has not loaded it (it started before pyxis was in the "
             "plugin stack)", f"on {node.name}: {restart} (slurmd reads its plugin stack when it starts)",
             severity=ERROR)

"""The lab's enroot and pyxis packages: shaped as NVIDIA's (enroot+caps at its enroot's version; pyxis as its
`make deb` packages it, depending on enroot, its plugstack line in /usr/share/pyxis/pyxis.conf), and the plugin a
recipe the repository's key holds, compiled only when the package is built."""

from __future__ import annotations

from provision.capabilities.slurm.pyxis import PYXIS_SHIPPED_CONF, plugin_path
from provision_lab import stack_pyxis
from provision_lab.deb import REVISION, Built


def test_enroot_caps_is_pinned_to_its_enroot_and_pyxis_depends_on_enroot_as_nvidias_do():
    debs = {(d.name, d.version): d for d in stack_pyxis.debs()}
    for version in stack_pyxis.ENROOT_VERSIONS:
        assert debs[("enroot+caps", version + REVISION)].depends == f"enroot (= {version}{REVISION})"
        assert f"echo {version}" in debs[("enroot", version + REVISION)].files["/usr/bin/enroot"][1]
    (pyxis,) = [d for d in debs.values() if d.name == "nvslurm-plugin-pyxis"]
    assert pyxis.depends == "enroot (>= 1.1.0)"  # pyxis's debian/control


def test_provision_reads_the_lab_packages_plugin_line_as_it_reads_pyxiss():
    (pyxis,) = [d for d in stack_pyxis.debs() if d.name == "nvslurm-plugin-pyxis"]
    _, conf = pyxis.files[PYXIS_SHIPPED_CONF]
    assert isinstance(conf, str) and plugin_path(conf) == stack_pyxis.PLUGIN
    _, plugin = pyxis.files[stack_pyxis.PLUGIN]
    assert isinstance(plugin, Built) and "container-image" in plugin.recipe
    assert "slurm_spank_slurmd_exit" in plugin.recipe  # so slurmd keeps it loaded, as it keeps pyxis
    assert repr(plugin) == repr(Built(stack_pyxis.PLUGIN_SOURCE, lambda _: b""))  # the key: the recipe, not the maker

"""The lab's provision layer (provision_lab/pylayer.py): its cache key, the pip command lines, the wheel tags
it accepts, which older layers a new one removes, the node's `provision` script, and the build itself with
pip stubbed out. Pure logic on tmp_path: no pip download, no node (tests/lab boots real ones)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from provision_lab import layout, pylayer
from provision_lab.model import LabSpec, NodeSpec
from provision_lab.spec import LAB_KEYS, like_spec
from provision_lab.system import LabError
from paths import REPO



def fake_checkout(root: Path) -> Path:
    """A checkout's shape: pyproject, README, the packages (provision with a cache and a link into templates/)."""
    (root / "provision" / "__pycache__").mkdir(parents=True)
    (root / "provision_lab").mkdir()
    (root / "provision" / "data").mkdir()
    (root / "templates").mkdir()
    (root / "playbooks").mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "provision"\nversion = "0.1.0"\n')
    (root / "README.md").write_text("# provision\n")
    (root / "provision" / "__init__.py").write_text('__version__ = "0.1.0"\n')
    (root / "provision" / "__main__.py").write_text("from provision.cli import main\n\nmain()\n")
    (root / "provision_lab" / "spec.py").write_text("KEYS = ()\n")
    (root / "provision" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0compiled")
    (root / "templates" / "slurm.conf.j2").write_text("ClusterName={{ name }}\n")
    (root / "templates" / "check.sh").write_text("#!/bin/sh\n")
    (root / "playbooks" / "site.yaml").write_text("- tasks: []\n")
    os.symlink("../../templates", root / "provision" / "data" / "templates")
    return root


# --- the key ---------------------------------------------------------------------------------------------

def test_the_key_covers_the_package_templates_playbooks_and_pyproject(tmp_path):
    repo = fake_checkout(tmp_path)
    assert pylayer.source_files(repo) == [
        "README.md", "playbooks/site.yaml", "provision/__init__.py", "provision/__main__.py",
        "provision/data/templates", "provision_lab/spec.py", "pyproject.toml", "templates/check.sh",
        "templates/slurm.conf.j2"]  # no __pycache__; the link as a link
    key = pylayer.provision_key(repo)
    assert len(key) == 12 and key == pylayer.provision_key(repo)  # stable
    seen = {key}
    for path, text in [("provision_lab/spec.py", "KEYS = ('provision',)\n"),
                       ("templates/slurm.conf.j2", "ClusterName={{ cluster }}\n"),
                       ("playbooks/site.yaml", "- tasks: [gpu]\n"),
                       ("pyproject.toml", '[project]\nname = "provision"\nversion = "0.2.0"\n'),
                       ("provision_lab/new.py", "")]:  # an edit, or a new file: a new key
        (repo / path).write_text(text)
        key = pylayer.provision_key(repo)
        assert key not in seen, path
        seen.add(key)
    (repo / "provision_lab" / "new.py").rename(repo / "provision_lab" / "renamed.py")
    assert pylayer.provision_key(repo) not in seen  # the same content under another name


def test_the_key_ignores_caches_and_the_readme(tmp_path):
    repo = fake_checkout(tmp_path)
    key = pylayer.provision_key(repo)
    (repo / "provision" / "__pycache__" / "spec.cpython-311.pyc").write_bytes(b"\0other")
    (repo / "provision_lab" / "spec.pyc").write_bytes(b"\0stray")
    (repo / "provision.egg-info").mkdir()  # beside the package: not a source
    (repo / "provision" / "x.egg-info").mkdir()
    (repo / "provision" / "x.egg-info" / "PKG-INFO").write_text("Name: x\n")
    (repo / "README.md").write_text("# provision, reworded\n")
    assert pylayer.provision_key(repo) == key


def test_the_key_follows_where_a_link_points(tmp_path):
    repo = fake_checkout(tmp_path)
    key = pylayer.provision_key(repo)
    link = repo / "provision" / "data" / "templates"
    link.unlink()
    os.symlink("../../playbooks", link)
    assert pylayer.provision_key(repo) != key


def test_the_layer_is_named_with_its_prefix_version_python_and_key(tmp_path):
    path = pylayer.provision_layer_path(fake_checkout(tmp_path))
    assert path.parent == layout.CACHE
    assert path.name == f"python-provision-0.1.0-py3.11-{pylayer.provision_key(tmp_path)}"
    assert path.name.startswith(pylayer.PROVISION_PREFIX)
    assert pylayer.provision_layer_path(key="abc").name == "python-provision-0.1.0-py3.11-abc"


def test_this_checkout_is_the_repo_root():
    assert pylayer.repo_root() == REPO
    assert "provision/__main__.py" in pylayer.source_files(REPO)


# --- pip -------------------------------------------------------------------------------------------------

def test_the_wheel_is_built_alone_from_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = pylayer.wheel_arguments(Path("src"), Path("out"))  # relative "src" would be a package on an index
    assert argv[0] == "wheel" and "--no-deps" in argv
    assert argv[-1] == str(tmp_path / "src") and argv[argv.index("-w") + 1] == str(tmp_path / "out")


def test_the_install_is_wheels_only_for_the_node_python_and_platforms(tmp_path):
    wheel = tmp_path / "provision-0.1.0-py3-none-any.whl"
    argv = pylayer.provision_pip_arguments(tmp_path / "site", wheel)
    assert argv[0] == "install" and argv[-1] == str(wheel) and "--only-binary=:all:" in argv
    assert argv[argv.index("--target") + 1] == str(tmp_path / "site")
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert argv[argv.index("--implementation") + 1] == "cp" and argv[argv.index("--abi") + 1] == "cp311"
    platforms = [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"]
    assert platforms[0] == "manylinux_2_36_x86_64"  # bookworm's glibc first, then every older one
    assert {"manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"} <= set(platforms)
    assert not any("2_37" in p or "aarch64" in p for p in platforms)
    assert "--no-deps" not in argv  # the dependencies come with it


@pytest.mark.parametrize(("tag", "fits"), [
    ("py3-none-any", True), ("py2.py3-none-any", True), ("cp311-none-any", True),
    ("cp311-cp311-manylinux_2_17_x86_64", True), ("cp311-cp311-manylinux2014_x86_64", True),
    ("cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64", True),
    ("cp39-abi3-manylinux_2_34_x86_64", True), ("cp311-abi3-manylinux_2_28_x86_64", True),
    ("py2-none-any", False), ("py312-none-any", False), ("cp312-cp312-manylinux_2_17_x86_64", False),
    ("cp312-abi3-manylinux_2_28_x86_64", False), ("cp311-cp311-manylinux_2_17_aarch64", False),
    ("cp311-cp311-musllinux_1_2_x86_64", False), ("cp311-cp311-win_amd64", False),
    ("cp311-cp311-linux_x86_64", False), ("garbage", False),
])
def test_wheel_tags_the_node_python_loads(tag, fits):
    assert pylayer.tag_fits_node(tag) is fits


def installed(site: Path, name: str, *tags: str) -> None:
    info = site / f"{name}.dist-info"
    info.mkdir(parents=True)
    (info / "WHEEL").write_text("Wheel-Version: 1.0\n" + "".join(f"Tag: {t}\n" for t in tags))


def test_the_installed_wheels_are_checked(tmp_path):
    site = tmp_path / "site"
    installed(site, "provision-0.1.0", "py3-none-any")
    installed(site, "pydantic_core-2.50.4", "cp311-cp311-manylinux_2_17_x86_64", "cp311-cp311-manylinux2014_x86_64")
    installed(site, "py-1.0", "py2-none-any", "py3-none-any")  # one tag of several is enough
    assert pylayer.check_wheel_tags(site)["pydantic_core-2.50.4"] == (
        "cp311-cp311-manylinux_2_17_x86_64 cp311-cp311-manylinux2014_x86_64")
    installed(site, "numpy-2.4.6", "cp312-cp312-manylinux_2_28_x86_64")
    (site / "odd-1.0.dist-info").mkdir()
    with pytest.raises(LabError, match=r"numpy-2.4.6 \(cp312-cp312-manylinux_2_28_x86_64\); odd-1.0 \(no WHEEL"):
        pylayer.check_wheel_tags(site)


# --- the node's script, the pruning -----------------------------------------------------------------------

def test_the_provision_script_runs_the_package_with_the_node_python():
    script = pylayer.PROVISION_SCRIPT
    assert script.startswith("#!/bin/sh\n") and script.endswith('exec /usr/bin/python3 -m provision "$@"\n')
    assert pylayer.PROVISION_BIN == "usr/local/bin/provision"
    assert (REPO / "provision" / "__main__.py").is_file()


def test_python_dash_m_provision_works():
    done = subprocess.run([sys.executable, "-m", "provision", "--version"], capture_output=True, text=True,
                          timeout=120, cwd=REPO, check=False)
    assert done.returncode == 0 and "provision" in done.stdout and "0.1.0" in done.stdout


def test_a_new_layer_removes_the_older_ones_no_mounted_node_uses(tmp_path):
    cache = tmp_path / "cache"
    for name in ("python-provision-0.1.0-py3.11-aaa", "python-provision-0.1.0-py3.11-bbb",
                 "python-provision-0.1.0-py3.11-mounted", "python-torch-2.13.0-cpu-py3.11-r2", "rootfs-bookworm-x"):
        (cache / name / "root").mkdir(parents=True)
    (cache / "python-provision-stray-file").write_text("")  # not a layer directory
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"97 30 0:52 / /var/lib/provision-lab/x/nodes/lab-a/root rw - overlay plab-lab-a rw,"
                         f"lowerdir={cache}/python-provision-0.1.0-py3.11-mounted/root:{cache}/rootfs-bookworm-x/root,"
                         "upperdir=/u,workdir=/w\n")
    keep = cache / "python-provision-0.1.0-py3.11-new"
    assert pylayer.stale_provision_layers(keep, mountinfo) == [cache / "python-provision-0.1.0-py3.11-aaa",
                                                                cache / "python-provision-0.1.0-py3.11-bbb"]


# --- the build, pip stubbed out ------------------------------------------------------------------------------

def test_the_build_makes_the_layer_and_removes_the_older_one(tmp_path, monkeypatch):
    repo = fake_checkout(tmp_path / "repo")
    cache = tmp_path / "cache"
    (cache / "python-provision-0.1.0-py3.11-old" / "root").mkdir(parents=True)
    monkeypatch.setattr(layout, "CACHE", cache)
    monkeypatch.setattr(pylayer, "repo_root", lambda: repo)
    monkeypatch.setattr(pylayer, "pip_command", lambda: ["pip"])
    real_run, calls = pylayer.run, []

    def fake_run(argv, **kwargs):
        if argv[0] != "pip":
            return real_run(argv, **kwargs)
        calls.append(argv)
        if argv[1] == "wheel":  # the copy it builds from: the sources, no cache
            src = Path(argv[-1])
            assert (src / "pyproject.toml").is_file() and (src / "README.md").is_file()
            assert (src / "provision" / "data" / "templates" / "slurm.conf.j2").is_file()  # the link still works
            assert not (src / "provision" / "__pycache__").exists()
            out = Path(argv[argv.index("-w") + 1])
            out.mkdir(parents=True, exist_ok=True)
            (out / "provision-0.1.0-py3-none-any.whl").write_bytes(b"PK")
        else:
            site = Path(argv[argv.index("--target") + 1])
            installed(site, "provision-0.1.0", "py3-none-any")
            installed(site, "pyyaml-6.0.3", "cp311-cp311-manylinux_2_17_x86_64")
            (site / "bin").mkdir()
            (site / "bin" / "provision").write_text("#!/work/main/.venv/bin/python\n")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(pylayer, "run", fake_run)
    logged = []
    root = pylayer.ensure_provision_layer(logged.append)
    layer = cache / f"python-provision-0.1.0-py3.11-{pylayer.provision_key(repo)}"
    assert root == layer / "root"
    assert [c[1] for c in calls] == ["wheel", "install"] and calls[1][-1].endswith("provision-0.1.0-py3-none-any.whl")
    script = root / "usr" / "local" / "bin" / "provision"
    assert script.read_text() == pylayer.PROVISION_SCRIPT and script.stat().st_mode & 0o777 == 0o755
    site = root / pylayer.SITE
    assert not (site / "bin").exists()  # this machine's console scripts: gone
    assert sorted(p.name for p in layer.iterdir()) == ["layer.txt", "root"]  # no wheel, no source copy left
    assert "pyyaml-6.0.3 cp311-cp311-manylinux_2_17_x86_64" in (layer / "layer.txt").read_text()
    assert not (cache / "python-provision-0.1.0-py3.11-old").exists()
    assert any("Removing the older provision layer" in line for line in logged)
    calls.clear()
    assert pylayer.ensure_provision_layer(logged.append) == root and not calls  # cached: no pip


def test_the_build_refuses_a_wheel_for_another_python(tmp_path, monkeypatch):
    repo = fake_checkout(tmp_path / "repo")
    monkeypatch.setattr(layout, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(pylayer, "repo_root", lambda: repo)
    monkeypatch.setattr(pylayer, "pip_command", lambda: ["pip"])
    real_run = pylayer.run

    def fake_run(argv, **kwargs):
        if argv[0] != "pip":
            return real_run(argv, **kwargs)
        if argv[1] == "wheel":
            out = Path(argv[argv.index("-w") + 1])
            out.mkdir(parents=True, exist_ok=True)
            (out / "provision-0.1.0-py3-none-any.whl").write_bytes(b"PK")
        else:
            site = Path(argv[argv.index("--target") + 1])
            installed(site, "provision-0.1.0", "py3-none-any")
            installed(site, "markupsafe-3.0.4", "cp312-cp312-manylinux_2_17_x86_64")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(pylayer, "run", fake_run)
    with pytest.raises(LabError, match="cannot build the lab's provision layer.*markupsafe-3.0.4"):
        pylayer.ensure_provision_layer(lambda line: None)
    assert not list((tmp_path / "cache").glob("python-provision-*"))


# --- which nodes get it -----------------------------------------------------------------------------------------

def test_custom_lab_provision_picks_the_nodes(tmp_path):
    assert "provision" in LAB_KEYS
    path = tmp_path / "inv.yaml"
    path.write_text(textwrap.dedent("""\
        all:
          hosts:
            a: {provision_custom: {lab: {provision: true}}}
            b: {}
        """))
    nodes = {n.name: n for n in like_spec(path).nodes}
    assert nodes["lab-a"].provision is True and nodes["lab-b"].provision is False


def test_custom_lab_provision_must_be_a_bool(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {"provision_custom": {"lab": {"provision": "yes"}}}}}}))
    with pytest.raises(LabError, match="provision_custom.lab.provision must be true or false") as caught:
        like_spec(path)
    assert caught.value.exit_code == 2


def test_the_layout_names_provision_only_where_true():
    """A lab made before the key existed (its state has no provision) is still the same lab."""
    spec = LabSpec([NodeSpec("lab-a", 1), NodeSpec("lab-b", 2, provision=True)], {}, "test")
    plain, with_provision = spec.layout()
    assert "provision" not in plain and with_provision["provision"] is True
    assert NodeSpec(**plain).provision is False


def test_the_copy_built_from_has_the_key_of_the_checkout(tmp_path):
    repo = fake_checkout(tmp_path / "repo")
    (repo / "provision.egg-info").mkdir()
    (repo / "build" / "lib" / "provision").mkdir(parents=True)
    (repo / "build" / "lib" / "provision" / "stale.py").write_text("")
    pylayer.copy_sources(repo, tmp_path / "src")
    assert pylayer.provision_key(tmp_path / "src") == pylayer.provision_key(repo)
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["README.md", "playbooks", "provision",
                                                                    "provision_lab", "pyproject.toml", "templates"]
    assert not list((tmp_path / "src").rglob("*.pyc"))


def test_up_on_a_running_lab_says_when_its_provision_is_older(tmp_path, monkeypatch):
    from provision_lab.cluster import Lab

    monkeypatch.setattr(pylayer, "provision_layer_path", lambda: Path("/cache/python-provision-0.1.0-py3.11-new"))
    spec = LabSpec([NodeSpec("lab-a", 1, provision=True)], {}, "test")
    lab, said = Lab(tmp_path / "lab"), []
    lab._note_older_provision({"provision_layer": "/cache/python-provision-0.1.0-py3.11-new/root"}, spec, said.append)
    assert said == []
    lab._note_older_provision({"provision_layer": "/cache/python-provision-0.1.0-py3.11-old/root"}, spec, said.append)
    assert len(said) == 1 and "older checkout (python-provision-0.1.0-py3.11-old" in said[0]
    lab._note_older_provision({}, spec, said.append)  # a lab made without the layer
    lab._note_older_provision({"provision_layer": "/cache/x/root"}, LabSpec([NodeSpec("lab-a", 1)], {}, "t"),
                              said.append)
    assert len(said) == 1

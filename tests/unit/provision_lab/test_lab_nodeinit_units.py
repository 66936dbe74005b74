"""A lab node's PID 1 (provision_lab/nodeinit.py) reads units the way systemd does: conditions, User=/Group=,
RuntimeDirectory=, Limit*=, Exec prefixes; the boot's cgroup mounts and GPU device nodes; and the host side
of a node (its cgroups, /etc/hosts, the Python layer's checks). Pure logic on tmp_path: no node runs here
(tests/lab/test_lab_node_services.py boots real ones)."""

from __future__ import annotations

import json
import os
import pwd
import resource
import stat
import tempfile
import textwrap
from pathlib import Path

import pytest

from provision_lab import cgroups
from provision_lab import node as lab_node
from provision_lab import nodeinit, pylayer
from provision_lab.system import LabError

ROOT = os.geteuid() == 0

# Debian bookworm's own units (munge 0.5.15, slurm 22.05), as the lab's apt repository serves them.
MUNGE = """\
[Unit]
Description=MUNGE authentication service
Wants=network-online.target
After=network-online.target
After=time-sync.target

[Service]
Type=forking
EnvironmentFile=-/etc/default/munge
ExecStart=/usr/sbin/munged $OPTIONS
PIDFile=/run/munge/munged.pid
RuntimeDirectory=munge
RuntimeDirectoryMode=0755
User=munge
Group=munge
Restart=on-abort

[Install]
WantedBy=multi-user.target
"""
SLURMD = """\
[Unit]
Description=Slurm node daemon
After=munge.service network-online.target remote-fs.target
Wants=network-online.target
ConditionPathExists=/etc/slurm/slurm.conf

[Service]
Type=simple
EnvironmentFile=-/etc/default/slurmd
ExecStart=/usr/sbin/slurmd -D -s $SLURMD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
PIDFile=/run/slurmd.pid
KillMode=process
LimitNOFILE=131072
LimitMEMLOCK=infinity
LimitSTACK=infinity
Delegate=yes
TasksMax=infinity
"""


@pytest.fixture(autouse=True)
def boot_log(tmp_path, monkeypatch) -> Path:
    """nodeinit logs to the node's boot log: here a file of the test's own."""
    log = tmp_path / "boot.log"
    monkeypatch.setattr(nodeinit, "LOG", str(log))
    return log


def unit(tmp_path: Path, text: str, name: str = "x.service") -> dict[str, list[str]]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return nodeinit.parse_unit(str(path))


# --- the packaged units ------------------------------------------------------------------------

def test_packaged_units_parse_into_what_systemd_would_run(tmp_path):
    munge, slurmd = unit(tmp_path, MUNGE, "munge.service"), unit(tmp_path, SLURMD, "slurmd.service")
    assert nodeinit.last(munge, "Service.Type") == "forking"
    assert nodeinit.last(munge, "Service.User") == "munge" and nodeinit.last(munge, "Service.Group") == "munge"
    assert nodeinit.words(munge, "Unit.After") == ["network-online.target", "time-sync.target"]  # both lines
    assert nodeinit.words(munge, "Service.RuntimeDirectory") == ["munge"]
    argv, ignore = nodeinit.command_argv(munge["Service.ExecStart"][0], {"OPTIONS": ""})
    assert argv == ["/usr/sbin/munged"] and not ignore  # an empty $OPTIONS is no argument at all
    assert nodeinit.boot_order({"slurmd.service": slurmd, "munge.service": munge}) == ["munge.service",
                                                                                        "slurmd.service"]
    limits = nodeinit.unit_rlimits(slurmd)
    assert limits == {resource.RLIMIT_NOFILE: (131072, 131072),
                      resource.RLIMIT_MEMLOCK: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
                      resource.RLIMIT_STACK: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)}


def test_a_later_empty_assignment_resets_and_the_last_single_value_wins(tmp_path):
    parsed = unit(tmp_path, """\
        [Service]
        User=root
        User=nobody
        RuntimeDirectory=a b
        RuntimeDirectory=
        RuntimeDirectory=c
        """)
    assert nodeinit.last(parsed, "Service.User") == "nobody"
    assert nodeinit.words(parsed, "Service.RuntimeDirectory") == ["c"]
    assert nodeinit.last(parsed, "Service.Group", "none") == "none"


def test_the_boot_pulls_in_what_enabled_units_want_each_read_with_its_dropins(tmp_path, monkeypatch, boot_log):
    etc, lib = tmp_path / "etc", tmp_path / "lib"
    monkeypatch.setattr(nodeinit, "UNIT_DIRS", (str(etc), str(lib)))
    (etc / "multi-user.target.wants").mkdir(parents=True)
    lib.mkdir()
    (lib / "provision-gpu-tuning.service").write_text(
        "[Unit]\nWants=nvidia-persistenced.service gone.service syslog.target\n"
        "After=nvidia-persistenced.service\n[Service]\nType=oneshot\nExecStart=/bin/true\n")
    (etc / "multi-user.target.wants" / "provision-gpu-tuning.service").symlink_to(lib / "provision-gpu-tuning.service")
    (lib / "nvidia-persistenced.service").write_text(  # static (no [Install]), as Ubuntu ships it
        "[Unit]\nRequires=nvpd-helper.service\n[Service]\nType=forking\n"
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose\n")
    (lib / "nvpd-helper.service").write_text("[Service]\nExecStart=/bin/true\n")
    for directory, name, text in ((etc, "provision.conf", "[Service]\nExecStart=\n"
                                   "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose\n"),
                                  (lib, "provision.conf", "[Service]\nUser=hidden-by-etcs\n"),
                                  (lib, "10-vendor.conf", "[Service]\nUMask=0077\n")):
        (directory / "nvidia-persistenced.service.d").mkdir(exist_ok=True)
        (directory / "nvidia-persistenced.service.d" / name).write_text(text)
    units = nodeinit.enabled_units()
    assert sorted(units) == ["nvidia-persistenced.service", "nvpd-helper.service", "provision-gpu-tuning.service"]
    daemon = units["nvidia-persistenced.service"]
    assert daemon["Service.ExecStart"] == ["/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose"]
    assert nodeinit.last(daemon, "Service.UMask") == "0077" and "Service.User" not in daemon
    assert nodeinit.boot_order(units).index("nvidia-persistenced.service") < \
        nodeinit.boot_order(units).index("provision-gpu-tuning.service")
    assert "gone.service: wanted by provision-gpu-tuning.service, but there is no such unit" in boot_log.read_text()


# --- conditions --------------------------------------------------------------------------------

def test_condition_path_exists_and_its_negation(tmp_path):
    present, absent = tmp_path / "slurm.conf", tmp_path / "missing"
    present.write_text("x")
    assert nodeinit.unmet_conditions({"Unit.ConditionPathExists": [str(present)]}) == []
    assert nodeinit.unmet_conditions({"Unit.ConditionPathExists": [str(absent)]}) == [
        f"ConditionPathExists={absent}"]
    assert nodeinit.unmet_conditions({"Unit.ConditionPathExists": [f"!{absent}"]}) == []
    assert nodeinit.unmet_conditions({"Unit.ConditionPathExists": [f"!{present}"]}) == [
        f"ConditionPathExists=!{present}"]
    both = {"Unit.ConditionPathExists": [str(present), str(absent)]}  # every plain condition must hold
    assert nodeinit.unmet_conditions(both) == [f"ConditionPathExists={absent}"]


def test_triggering_conditions_need_one_of_them(tmp_path):
    present, absent = tmp_path / "a", tmp_path / "b"
    present.mkdir()
    one_of = {"Unit.ConditionPathExists": [f"|{absent}"], "Unit.ConditionPathIsDirectory": [f"|{present}"]}
    assert nodeinit.unmet_conditions(one_of) == []
    none_of = {"Unit.ConditionPathExists": [f"|{absent}", f"|!{present}"]}
    assert nodeinit.unmet_conditions(none_of) == [f"ConditionPathExists=|{absent} | ConditionPathExists=|!{present}"]


def test_other_condition_kinds(tmp_path):
    empty, full, directory = tmp_path / "empty", tmp_path / "full", tmp_path / "d"
    empty.write_text("")
    full.write_text("x")
    directory.mkdir()
    assert nodeinit.unmet_conditions({"Unit.ConditionFileNotEmpty": [str(empty)]})
    assert not nodeinit.unmet_conditions({"Unit.ConditionFileNotEmpty": [str(full)]})
    assert nodeinit.unmet_conditions({"Unit.ConditionDirectoryNotEmpty": [str(directory)]})
    assert not nodeinit.unmet_conditions({"Unit.ConditionPathExistsGlob": [str(tmp_path / "f*")]})
    # a kind this init cannot judge counts as met, and is named for the log
    virt = {"Unit.ConditionVirtualization": ["!container"]}
    assert nodeinit.unmet_conditions(virt) == [] and nodeinit.unknown_conditions(virt) == ["ConditionVirtualization"]


def test_a_unit_whose_condition_fails_is_skipped_with_a_log_line(tmp_path, boot_log):
    marker = tmp_path / "ran"
    parsed = unit(tmp_path, f"""\
        [Unit]
        ConditionPathExists={tmp_path}/etc/slurm/slurm.conf
        [Service]
        Type=oneshot
        ExecStart=/bin/touch {marker}
        """)
    nodeinit.start_unit("slurmd.service", parsed)
    assert not marker.exists()
    assert f"slurmd.service: condition not met (ConditionPathExists={tmp_path}/etc/slurm/slurm.conf); skipped" \
        in boot_log.read_text()


# --- users, groups, directories, limits, prefixes --------------------------------------------------

def test_credentials_from_user_and_group():
    assert nodeinit.unit_credentials({}) is None  # root, as PID 1
    nobody = pwd.getpwnam("nobody")
    creds = nodeinit.unit_credentials({"Service.User": ["nobody"]})
    assert (creds.uid, creds.gid) == (nobody.pw_uid, nobody.pw_gid) and nobody.pw_gid in creds.groups
    assert creds.env == {"USER": "nobody", "LOGNAME": "nobody", "HOME": nobody.pw_dir, "SHELL": nobody.pw_shell}
    by_number = nodeinit.unit_credentials({"Service.User": [str(nobody.pw_uid)], "Service.Group": ["0"]})
    assert (by_number.uid, by_number.gid) == (nobody.pw_uid, 0)
    group_only = nodeinit.unit_credentials({"Service.Group": [str(nobody.pw_gid)]})
    assert (group_only.uid, group_only.gid, group_only.env) == (0, nobody.pw_gid, {})
    extra = nodeinit.unit_credentials({"Service.User": ["nobody"], "Service.SupplementaryGroups": ["0"]})
    assert 0 in extra.groups


def test_an_unknown_user_or_group_is_named():
    with pytest.raises(KeyError, match="user no-such-user-x"):
        nodeinit.unit_credentials({"Service.User": ["no-such-user-x"]})
    with pytest.raises(KeyError, match="group no-such-group-x"):
        nodeinit.unit_credentials({"Service.User": ["nobody"], "Service.Group": ["no-such-group-x"]})


def test_rlimit_values():
    inf = resource.RLIM_INFINITY
    assert nodeinit.parse_rlimit("infinity") == (inf, inf)
    assert nodeinit.parse_rlimit("65536") == (65536, 65536)
    assert nodeinit.parse_rlimit("1024:524288") == (1024, 524288)
    assert nodeinit.parse_rlimit("8M") == (8 << 20, 8 << 20)
    assert nodeinit.parse_rlimit("4K:infinity") == (4096, inf)
    with pytest.raises(ValueError):
        nodeinit.parse_rlimit("lots")


def test_exec_prefixes():
    env = {"X": "a b"}
    assert nodeinit.command_argv("-/bin/echo $X", env) == (["/bin/echo", "a", "b"], True)
    assert nodeinit.command_argv(":/bin/echo $X ${X}", env) == (["/bin/echo", "$X", "${X}"], False)
    assert nodeinit.command_argv("+@/bin/sh sh -c true", env) == (["/bin/sh", "sh", "-c", "true"], False)
    assert nodeinit.exec_prefixes("!!-/bin/true") == "!!-"


def test_runtime_directory_is_made_owned_and_its_mode_set(tmp_path, monkeypatch):
    monkeypatch.setattr(nodeinit, "UNIT_DIRECTORIES", {
        "RuntimeDirectory": (str(tmp_path / "run"), "RUNTIME_DIRECTORY"),
        "StateDirectory": (str(tmp_path / "var/lib"), "STATE_DIRECTORY")})
    parsed = {"Service.RuntimeDirectory": ["munge other"], "Service.RuntimeDirectoryMode": ["0750"],
              "Service.StateDirectory": ["munge"]}
    creds = nodeinit.Credentials(os.getuid(), os.getgid(), [os.getgid()], {})
    env = nodeinit.make_unit_directories("munge.service", parsed, creds)
    assert env == {"RUNTIME_DIRECTORY": f"{tmp_path}/run/munge:{tmp_path}/run/other",
                   "STATE_DIRECTORY": f"{tmp_path}/var/lib/munge"}
    assert stat.S_IMODE((tmp_path / "run/munge").stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "var/lib/munge").stat().st_mode) == 0o755  # the default mode


@pytest.mark.skipif(not ROOT, reason="switching to another user needs root")
def test_a_unit_runs_as_its_user_with_its_runtime_directory_and_limits(tmp_path, monkeypatch, boot_log):
    """What munge.service needs: the daemon as User=, in RuntimeDirectory= owned by it, Limit*= applied."""
    with tempfile.TemporaryDirectory(prefix="provision-nodeinit-") as run:  # pytest's base is root's alone
        os.chmod(run, 0o755)
        monkeypatch.setattr(nodeinit, "UNIT_DIRECTORIES", {"RuntimeDirectory": (run, "RUNTIME_DIRECTORY")})
        runs_as_its_user(tmp_path, Path(run), boot_log)


def runs_as_its_user(tmp_path: Path, run: Path, boot_log: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    parsed = unit(tmp_path, """\
        [Service]
        Type=oneshot
        User=nobody
        RuntimeDirectory=svc
        RuntimeDirectoryMode=0700
        LimitNOFILE=4096:8192
        Environment=GREETING=hi
        ExecStartPre=+/bin/sh -c 'id -u > "$RUNTIME_DIRECTORY/pre"'
        ExecStart=/bin/sh -c 'echo "$(id -u) $(id -g) $USER $HOME $GREETING \\
            $(ulimit -n) $(ulimit -Hn) $(pwd)" > "$RUNTIME_DIRECTORY/out"'
        """)
    nodeinit.start_unit("svc.service", parsed)
    runtime = run / "svc"
    assert (runtime.stat().st_uid, stat.S_IMODE(runtime.stat().st_mode)) == (nobody.pw_uid, 0o700)
    assert (runtime / "out").read_text().split() == [str(nobody.pw_uid), str(nobody.pw_gid), "nobody",
                                                     nobody.pw_dir, "hi", "4096", "8192", "/"]
    assert (runtime / "pre").read_text() == "0\n"  # "+": full privileges despite User=
    assert "svc.service: ExecStart /bin/sh -c" in boot_log.read_text()
    assert f"(uid {nobody.pw_uid}, gid {nobody.pw_gid}) -> 0" in boot_log.read_text()


def test_a_unit_whose_user_is_missing_fails_alone(tmp_path, boot_log):
    parsed = unit(tmp_path, f"""\
        [Service]
        User=no-such-user-x
        ExecStart=/bin/touch {tmp_path}/ran
        """)
    nodeinit.start_unit("x.service", parsed)
    assert not (tmp_path / "ran").exists()
    assert "x.service: failed: no user no-such-user-x (User=/Group=)" in boot_log.read_text()


# --- the machine at boot: cgroups, GPU device nodes -------------------------------------------------

def fake_mounts(monkeypatch, refused: set[str]) -> list[list[str]]:
    """mount(8) as nodeinit runs it, refusing the hierarchies in refused (as a kernel with cpu and cpuacct
    bound apart refuses "cpu,cpuacct")."""
    calls = []

    def run_quiet(argv):
        calls.append(argv)
        hierarchy = argv[argv.index("-o") + 1].removeprefix("nosuid,nodev,noexec,")
        return "mount: permission denied." if argv[2] == "cgroup" and hierarchy in refused else None

    monkeypatch.setattr(nodeinit, "run_quiet", run_quiet)
    return calls


def test_cgroup_controllers_mount_like_a_v1_machine(tmp_path, monkeypatch, boot_log):
    calls = fake_mounts(monkeypatch, refused=set())
    assert nodeinit.mount_cgroups(str(tmp_path), ("freezer", "cpu,cpuacct")) == []
    assert calls[0] == ["mount", "-t", "tmpfs", "-o", "nosuid,nodev,noexec,mode=0755", "cgroup", str(tmp_path)]
    assert calls[1] == ["mount", "-t", "cgroup", "-o", "nosuid,nodev,noexec,freezer", "cgroup",
                        f"{tmp_path}/freezer"]
    assert os.readlink(tmp_path / "cpu") == "cpu,cpuacct" and os.readlink(tmp_path / "cpuacct") == "cpu,cpuacct"
    assert "cgroups (v1) mounted: freezer cpu,cpuacct" in boot_log.read_text()


def test_cgroup_controllers_the_kernel_holds_apart_mount_each_alone_and_failures_are_logged(
        tmp_path, monkeypatch, boot_log):
    fake_mounts(monkeypatch, refused={"cpu,cpuacct", "pids"})
    assert nodeinit.mount_cgroups(str(tmp_path), ("memory", "cpu,cpuacct", "pids")) == ["pids"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "boot.log") == ["cpu", "cpuacct", "memory"]
    assert not (tmp_path / "cpu").is_symlink()
    assert "cgroups (v1) mounted: memory cpu cpuacct; failed: pids" in boot_log.read_text()


def test_gpu_count_is_the_configured_gpus_less_gone_ones(tmp_path):
    config, state = tmp_path / "config.json", tmp_path / "state.json"
    assert nodeinit.gpu_count(str(config), str(state)) == 0  # no driver config: no GPU
    config.write_text(json.dumps({"gpus": [{"model": "v100-sxm2-16gb", "count": 4},
                                           {"model": "rtx-3090", "count": 1}]}))
    assert nodeinit.gpu_count(str(config), str(state)) == 5
    state.write_text(json.dumps({"gpus": [{"gone": i == 2} for i in range(5)]}))
    assert nodeinit.gpu_count(str(config), str(state)) == 4  # a dead card does not enumerate
    state.write_text(json.dumps({"gpus": [{"gone": True}]}))  # another machine's state: not these GPUs
    assert nodeinit.gpu_count(str(config), str(state)) == 5


@pytest.mark.skipif(not ROOT, reason="mknod needs root")
def test_gpu_device_nodes_as_the_driver_makes_them(tmp_path):
    made = nodeinit.make_gpu_devices(2, str(tmp_path))
    assert made == [f"{tmp_path}/nvidiactl", f"{tmp_path}/nvidia0", f"{tmp_path}/nvidia1"]
    for name, minor in (("nvidiactl", 255), ("nvidia0", 0), ("nvidia1", 1)):
        info = (tmp_path / name).stat()
        assert stat.S_ISCHR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o666
        assert (os.major(info.st_rdev), os.minor(info.st_rdev)) == (195, minor)
    assert nodeinit.make_gpu_devices(2, str(tmp_path)) == made  # a second boot's call finds them


# --- the host side of a node: its cgroups, /etc/hosts; the Python layer ---------------------------------

def test_the_node_cgroups_go_under_this_process_own_in_each_v1_hierarchy(tmp_path):
    cgroup, mountinfo = tmp_path / "cgroup", tmp_path / "mountinfo"
    cgroup.write_text("9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/user.slice\n1:pids:/\n0::/\n")
    mountinfo.write_text(
        "30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"
        "31 30 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "32 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "33 30 0:29 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
        "34 30 0:30 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    assert cgroups.v1_hierarchies(cgroup, mountinfo) == [Path("/sys/fs/cgroup/memory/process_api/abc"),
                                                          Path("/sys/fs/cgroup/cpu,cpuacct/user.slice")]
    cgroup.write_text("0::/init.scope\n")  # cgroup v2 only: no v1 hierarchy, no cgroup namespace
    assert cgroups.v1_hierarchies(cgroup, mountinfo) == []


def test_removing_a_node_cgroups_takes_what_it_made_below_and_nothing_else(tmp_path):
    node = tmp_path / "freezer" / "plab3-lab-node-1"
    (node / "slurm_lab-node-1" / "uid_0" / "job_1").mkdir(parents=True)
    other = tmp_path / "freezer" / "someone-else"
    other.mkdir()
    record = tmp_path / "cgroups"
    record.write_text(f"{node}\n{other}\n{tmp_path / 'memory' / 'plab3-lab-node-1'}\n")
    assert cgroups.remove_cgroups(record) == []
    assert not node.exists() and other.is_dir() and not record.exists()
    assert cgroups.remove_cgroups(record) == []  # nothing recorded: nothing to do


def test_hosts_file_names_every_node_at_its_address():
    nodes = (("10.213.4.11", "lab-a"), ("10.213.4.12", "lab-b"))
    hosts = lab_node.hosts_file("lab-a", nodes)
    assert "10.213.4.11 lab-a\n10.213.4.12 lab-b\n" in hosts and "127.0.1.1" not in hosts
    assert hosts.startswith("127.0.0.1 localhost\n")
    assert "127.0.1.1 lab-a\n" in lab_node.hosts_file("lab-a", ())  # alone: Debian's line


def test_a_node_resolves_hosts_from_its_hosts_file_alone():
    """No DNS in the lab: an address /etc/hosts does not name is "not found" (getnameinfo gives the number), never
    a "temporary failure" from a resolver no node reaches (torch's c10d warned about it on every connection)."""
    debian = "passwd:         files\nhosts:          files dns\nnetworks:       files\nnetgroup:       nis\n"
    assert lab_node.nsswitch_file(debian) == debian.replace("files dns", "files")
    assert lab_node.nsswitch_file("") == "hosts:          files\n"


def test_the_python_layer_installs_the_cpu_build_for_the_node_python(tmp_path):
    argv = pylayer.pip_arguments(tmp_path / "site")
    assert argv[0] == "install" and "torch==2.13.0+cpu" in argv and "--only-binary=:all:" in argv
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert argv[argv.index("--platform") + 1] == "manylinux_2_28_x86_64"
    assert argv[argv.index("--target") + 1] == str(tmp_path / "site")


def dist_info(site: Path, name: str, version: str) -> None:
    (site / f"{name}-{version}.dist-info").mkdir(parents=True)
    (site / f"{name}-{version}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n"
                                                                   f"Version: {version}\n")


def test_the_python_layer_refuses_anything_but_the_cpu_build(tmp_path):
    cpu, cuda, with_nvidia = tmp_path / "cpu", tmp_path / "cuda", tmp_path / "nvidia"
    dist_info(cpu, "torch", "2.13.0+cpu")
    assert pylayer.check_cpu_build(cpu) == "2.13.0+cpu"
    dist_info(cuda, "torch", "2.13.0")
    with pytest.raises(LabError, match=r"torch 2.13.0: not the CPU build 2.13.0\+cpu"):
        pylayer.check_cpu_build(cuda)
    dist_info(with_nvidia, "torch", "2.13.0+cpu")
    dist_info(with_nvidia, "nvidia_cublas_cu12", "12.8.4.1")
    with pytest.raises(LabError, match="nvidia_cublas_cu12"):
        pylayer.check_cpu_build(with_nvidia)
    with pytest.raises(LabError, match="0 torch installations"):
        pylayer.check_cpu_build(tmp_path / "empty")


@pytest.mark.parametrize(("value", "wanted"), [(None, True), ("1", True), ("0", False), ("no", False),
                                               ("false", False), ("yes", True)])
def test_the_python_layer_switch(monkeypatch, value, wanted):
    if value is None:
        monkeypatch.delenv(pylayer.OFF_SWITCH, raising=False)
    else:
        monkeypatch.setenv(pylayer.OFF_SWITCH, value)
    assert pylayer.wanted() is wanted

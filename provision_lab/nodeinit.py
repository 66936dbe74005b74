"""PID 1 of a lab node (runs inside the node, with the node's own python3; stdlib only).

A boot, in the order a machine does it: the kernel's cgroup v1 controllers are
mounted under /sys/fs/cgroup (tmpfs, then freezer, cpuset, memory, devices,
cpu,cpuacct, blkio, pids, each best effort: what fails is logged), the GPUs
come up in their power-on state and the simulated driver installed on disk, if
any, loads (/proc/driver/nvidia/version), the driver makes its device nodes
(/dev/nvidiactl, /dev/nvidia0..N-1, char 195, mode 0666, when a driver loaded:
one per GPU that enumerates), the modules /etc/modules-load.d names load (as
systemd-modules-load does: load_modules, with the node's modprobe), the units enabled into a target run (their
ExecStartPre, ExecStart, ExecStartPost, ordered by After=/Before=, as systemd
would at boot), sshd starts. Then it reaps orphans until the node is powered off
(SIGKILL from the host; being PID 1, everything in the node dies with it).

Units are found where `systemctl enable` puts them:
/etc/systemd/system/*.target.wants/*.service, and with them the services they
pull in by Wants= and Requires= (as systemd's boot transaction does: the boot
unit's Wants=nvidia-persistenced.service starts a static daemon). Each unit is
read with its drop-ins (NAME.service.d/*.conf in the unit directories, in the
order of their file names, /etc's over /lib's of the same name), as systemd
merges them. Supported, as systemd does them:
  [Unit]    After=, Before= (ordering among the units started); Condition*= of kind PathExists,
            PathExistsGlob, PathIsDirectory, PathIsSymbolicLink, FileNotEmpty, FileIsExecutable,
            DirectoryNotEmpty, with "!" (negation) and "|" (triggering: one of them suffices); a unit
            whose condition fails is skipped, with a log line.
  [Service] Type= (oneshot and forking are waited for, 90 s; others run in the background), PIDFile=
            (read after a forking start), Environment=, EnvironmentFile= ("-": optional), $VAR/${VAR}
            in commands, Exec prefixes "-" (failure ignored), "@" (argv[0]), ":" (no expansion), "+"
            "!" "!!" (run as root despite User=); User=, Group= (uid, gid, the user's groups:
            initgroups; $USER $LOGNAME $HOME $SHELL set), SupplementaryGroups=, UMask=,
            WorkingDirectory=, RuntimeDirectory= StateDirectory= CacheDirectory= LogsDirectory=
            ConfigurationDirectory= (+ their *Mode=; under /run, /var/lib, /var/cache, /var/log,
            /etc; owned by User/Group; $RUNTIME_DIRECTORY etc. set), Limit*= (setrlimit, best effort).
Not supported: a Requires= unit failing does not stop the unit that requires it, *.wants/ directories
of a service, targets other than as the enabled links' directories, Restart=, watchdogs, ExecStop*, specifiers
(%n, %i), sockets, timers, Delegate= and TasksMax= (ignored). systemd itself never runs:
/run/systemd/system does not exist in a node, and its systemctl works offline (enable, is-enabled), so a unit
starts at the next boot; except on a node whose spec says systemd (provision_custom.lab.systemd): there the boot
makes /run/systemd/system and records each unit's main PID, and systemctl (this file, `--systemctl`) starts, stops,
restarts and tells a unit now, as systemd would (systemctl()).
"""

from __future__ import annotations

import glob
import graphlib
import grp
import json
import os
import pwd
import re
import resource
import shlex
import signal
import stat
import subprocess
import sys
import time
from typing import overload

GPUSIM = "/usr/lib/provision-lab/gpusim"  # the simulator's own commands (node.py installs it)
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
LAB_OWN_UNITS = {"ssh.service", "sshd.service"}  # the lab starts sshd itself, below
WAITED_TYPES = {"oneshot", "forking"}
LOG = "/var/log/provision-lab-boot.log"
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}

CGROUP_ROOT = "/sys/fs/cgroup"
# As a cgroup v1 machine (Debian with systemd, hybrid) mounts them; "a,b" is one hierarchy with both,
# linked as a and b too. Slurm's cgroup/v1 plugins use freezer, cpuset, memory, devices and cpuacct.
CGROUP_CONTROLLERS = ("cpuset", "cpu,cpuacct", "blkio", "memory", "devices", "freezer", "pids")
DRIVER_LOADED = "/proc/driver/nvidia/version"  # the loaded driver's (the simulator's boot writes it)
GPU_CONFIG = "/etc/nvidia-sim/config.json"
GPU_STATE = "/var/lib/nvidia-sim/state.json"
# A node whose spec says systemd (provision_custom.lab.systemd: node.py writes the mark): its boot makes
# /run/systemd/system, as systemd does (what provision and package scripts test for), records each unit it starts
# in UNIT_STATE, and SYSTEMCTL (/usr/local/sbin/systemctl, before the real one on PATH) starts, stops and tells
# units now, as systemd would, through this file (systemctl()).
SYSTEMD_MARK = "/usr/lib/provision-lab/systemd"
UNIT_STATE = "/run/provision-lab/units"  # NAME.pid: a started unit's main PID, 0 for a oneshot that ran
REAL_SYSTEMCTL = "/usr/bin/systemctl"
REBOOT = "/usr/sbin/reboot"  # layout.NODE_REBOOT
SYSTEMCTL = "/usr/local/sbin/systemctl"
# systemd-modules-load's directories, in its order: a file in an earlier one hides a later one of the same name.
MODULES_LOAD_DIRS = ("/etc/modules-load.d", "/run/modules-load.d", "/usr/local/lib/modules-load.d",
                     "/usr/lib/modules-load.d", "/lib/modules-load.d")
NVIDIA_MAJOR = 195  # the NVIDIA driver's character major: nvidia0..N-1 are minors 0..N-1, nvidiactl 255
NVIDIACTL_MINOR = 255

# Directory settings: where systemd puts each, and the variable it sets.
UNIT_DIRECTORIES = {"RuntimeDirectory": ("/run", "RUNTIME_DIRECTORY"),
                    "StateDirectory": ("/var/lib", "STATE_DIRECTORY"),
                    "CacheDirectory": ("/var/cache", "CACHE_DIRECTORY"),
                    "LogsDirectory": ("/var/log", "LOGS_DIRECTORY"),
                    "ConfigurationDirectory": ("/etc", "CONFIGURATION_DIRECTORY")}
RLIMITS = {"CPU": resource.RLIMIT_CPU, "FSIZE": resource.RLIMIT_FSIZE, "DATA": resource.RLIMIT_DATA,
           "STACK": resource.RLIMIT_STACK, "CORE": resource.RLIMIT_CORE, "RSS": resource.RLIMIT_RSS,
           "NOFILE": resource.RLIMIT_NOFILE, "AS": resource.RLIMIT_AS, "NPROC": resource.RLIMIT_NPROC,
           "MEMLOCK": resource.RLIMIT_MEMLOCK, "LOCKS": getattr(resource, "RLIMIT_LOCKS", 10),
           "SIGPENDING": getattr(resource, "RLIMIT_SIGPENDING", 11),
           "MSGQUEUE": getattr(resource, "RLIMIT_MSGQUEUE", 12), "NICE": getattr(resource, "RLIMIT_NICE", 13),
           "RTPRIO": getattr(resource, "RLIMIT_RTPRIO", 14), "RTTIME": getattr(resource, "RLIMIT_RTTIME", 15)}
SIZE_SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}


QUIET_LOG = False  # as systemctl: the log file only, not the caller's output


def log(message: str) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n"
    if not QUIET_LOG:
        sys.stdout.write(line)
        sys.stdout.flush()
    with open(LOG, "a") as fh:
        fh.write(line)


# --- unit files ------------------------------------------------------------------------------------

def parse_unit(path: str, dropins: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """"Section.Key" -> values, in order, from the unit file and then its drop-ins; an empty assignment
    resets the list (a drop-in's "ExecStart=" clears the unit's), as in systemd."""
    values: dict[str, list[str]] = {}
    section = ""
    text = ""
    for one in (path, *dropins):
        with open(one) as fh:
            text += re.sub(r"\\\n", " ", fh.read()) + "\n"  # line continuations
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line:
            key, _, value = line.partition("=")
            key, value = f"{section}.{key.strip()}", value.strip()
            values[key] = (values.get(key, []) + [value]) if value else []
    return values


@overload
def last(unit: dict[str, list[str]], key: str, default: str) -> str: ...
@overload
def last(unit: dict[str, list[str]], key: str, default: None = None) -> str | None: ...


def last(unit: dict[str, list[str]], key: str, default: str | None = None) -> str | None:
    """A single-valued setting: the last assignment wins."""
    values = unit.get(key) or []
    return values[-1] if values else default


def words(unit: dict[str, list[str]], key: str) -> list[str]:
    """A list setting (After=, RuntimeDirectory=, ...): every assignment's words, in order."""
    return " ".join(unit.get(key, [])).split()


def unit_file(link: str) -> str | None:
    if os.path.exists(link):
        return os.path.realpath(link)
    name = os.path.basename(link)
    template = re.sub(r"@[^.]*\.", "@.", name)
    for directory in UNIT_DIRS:
        for candidate in (name, template):
            if os.path.isfile(os.path.join(directory, candidate)):
                return os.path.join(directory, candidate)
    return None


def dropin_files(name: str) -> tuple[str, ...]:
    """NAME.d/*.conf across the unit directories, by file name; one in an earlier directory (/etc) hides a
    later one (/lib) of the same name. A template instance's (x@1.service) after its template's (x@.service)."""
    template = re.sub(r"@[^.]*\.", "@.", name)
    found: dict[str, str] = {}
    for unit_name in dict.fromkeys((template, name)):
        for directory in reversed(UNIT_DIRS):  # the earlier directories' files override
            for path in glob.glob(os.path.join(directory, f"{unit_name}.d", "*.conf")):
                found[os.path.basename(path)] = path
    return tuple(found[key] for key in sorted(found))


def enabled_units() -> dict[str, dict[str, list[str]]]:
    """The enabled services, and those they pull in by Wants=/Requires= (transitively), each read with its
    drop-ins."""
    units: dict[str, dict[str, list[str]]] = {}
    pending: list[tuple[str, str, str | None]] = [(os.path.basename(link), link, None)
               for link in sorted(glob.glob(f"{UNIT_DIRS[0]}/*.target.wants/*.service"))]
    while pending:
        name, link, wanted_by = pending.pop(0)
        if name in LAB_OWN_UNITS or name in units:
            continue
        path = unit_file(link)
        if path is None:
            log(f"{name}: enabled but its unit file is missing; skipped" if wanted_by is None else
                f"{name}: wanted by {wanted_by}, but there is no such unit; skipped")
            continue
        units[name] = parse_unit(path, dropin_files(name))
        pending += [(other, os.path.join(UNIT_DIRS[0], other), name)
                    for other in words(units[name], "Unit.Wants") + words(units[name], "Unit.Requires")
                    if other.endswith(".service")]
    return units


def boot_order(units: dict[str, dict[str, list[str]]]) -> list[str]:
    graph: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
    for name, unit in units.items():
        graph.add(name)
        for other in words(unit, "Unit.After"):
            if other in units:
                graph.add(name, other)
        for other in words(unit, "Unit.Before"):
            if other in units:
                graph.add(other, name)
    graph.prepare()
    order = []
    while graph.is_active():
        ready = sorted(graph.get_ready())
        order += ready
        graph.done(*ready)
    return order


# --- conditions ----------------------------------------------------------------------------------

def _dir_not_empty(path: str) -> bool:
    try:
        return os.path.isdir(path) and bool(os.listdir(path))
    except OSError:
        return False


CONDITION_TESTS = {
    "PathExists": os.path.exists,
    "PathExistsGlob": lambda pattern: bool(glob.glob(pattern)),
    "PathIsDirectory": os.path.isdir,
    "PathIsSymbolicLink": os.path.islink,
    "FileNotEmpty": lambda path: os.path.isfile(path) and os.path.getsize(path) > 0,
    "FileIsExecutable": lambda path: os.path.isfile(path) and os.access(path, os.X_OK),
    "DirectoryNotEmpty": _dir_not_empty,
}


def unmet_conditions(unit: dict[str, list[str]]) -> list[str]:
    """The unit's Condition*= that keep it from starting ("" when none), as systemd reads them: every
    plain condition must hold; of the triggering ones ("|"), at least one. Kinds this init does not know
    are logged by the caller and count as met."""
    failed, triggering, triggered = [], [], False
    for key, values in unit.items():
        section, _, name = key.partition(".")
        if section != "Unit" or not name.startswith("Condition"):
            continue
        kind = name[len("Condition"):]
        for value in values:
            trigger, value = value.startswith("|"), value.lstrip("|")
            negate, value = value.startswith("!"), value.lstrip("!")
            test = CONDITION_TESTS.get(kind)
            if test is None:
                continue
            met = bool(test(value)) != negate
            setting = f"{name}={'|' if trigger else ''}{'!' if negate else ''}{value}"
            if trigger:
                triggering.append(setting)
                triggered = triggered or met
            elif not met:
                failed.append(setting)
    if triggering and not triggered:
        failed.append(" | ".join(triggering))
    return failed


def unknown_conditions(unit: dict[str, list[str]]) -> list[str]:
    return [key.partition(".")[2] for key in unit if key.startswith("Unit.Condition")
            and key.partition(".")[2][len("Condition"):] not in CONDITION_TESTS]


# --- environment and commands ---------------------------------------------------------------------

def unit_environment(unit: dict[str, list[str]]) -> dict[str, str]:
    env = dict(ENV)
    for file in unit.get("Service.EnvironmentFile", []):
        optional, file = file.startswith("-"), file.lstrip("-")
        try:
            with open(file) as fh:
                for line in fh:
                    key, eq, value = line.strip().partition("=")
                    if eq and not key.startswith("#"):
                        env[key.strip()] = value.strip().strip('"\'')
        except OSError:
            if not optional:
                log(f"EnvironmentFile {file} is missing")
    for assignments in unit.get("Service.Environment", []):
        for item in shlex.split(assignments):
            key, eq, value = item.partition("=")
            if eq:
                env[key] = value
    return env


def exec_prefixes(line: str) -> str:
    """The special characters before an Exec line's command: "-", "@", ":", "+", "!" (or "!!")."""
    return line[:len(line) - len(line.lstrip("-@:+!"))]


def command_argv(line: str, env: dict[str, str]) -> tuple[list[str], bool]:
    """(argv, failure ignored) of one Exec line: prefixes stripped, variables expanded as systemd does
    (none with ":"; with "@" argv[0] is the second word, the executable the first)."""
    prefixes = exec_prefixes(line)
    argv = []
    for word in shlex.split(line[len(prefixes):]):
        whole = re.fullmatch(r"\$(\w+)", word)
        if ":" in prefixes:
            argv.append(word)
        elif whole:  # $VAR alone: split into words
            argv += env.get(whole.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\$|\$\{(\w+)\}", lambda m: env.get(m.group(1), "") if m.group(1) else "$", word))
    return argv, "-" in prefixes


class Credentials:
    """Who a unit's commands run as: User=/Group=/SupplementaryGroups= resolved in the node's passwd/group."""

    def __init__(self, uid: int, gid: int, groups: list[int], env: dict[str, str]):
        self.uid, self.gid, self.groups, self.env = uid, gid, groups, env

    def __repr__(self) -> str:
        return f"Credentials(uid={self.uid}, gid={self.gid}, groups={self.groups})"


def _user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        raise KeyError(f"user {name}") from None


def _group_id(name: str) -> int:
    try:
        return int(name) if name.isdigit() else grp.getgrnam(name).gr_gid
    except KeyError:
        raise KeyError(f"group {name}") from None


def unit_credentials(unit: dict[str, list[str]]) -> Credentials | None:
    """None: root, as PID 1 is. KeyError("user NAME" or "group NAME") when one does not exist in the node.
    With User=: its uid, Group= or its primary group, the groups it is a member of (initgroups), plus
    SupplementaryGroups=; $USER $LOGNAME $HOME $SHELL are its own."""
    user, group = last(unit, "Service.User"), last(unit, "Service.Group")
    extra = words(unit, "Service.SupplementaryGroups")
    if not user and not group and not extra:
        return None
    entry = _user(user or "root")
    gid = _group_id(group) if group else entry.pw_gid
    groups = os.getgrouplist(entry.pw_name, gid) if user else [gid]
    groups += [g for g in map(_group_id, extra) if g not in groups]
    env = {"USER": entry.pw_name, "LOGNAME": entry.pw_name, "HOME": entry.pw_dir, "SHELL": entry.pw_shell}
    return Credentials(entry.pw_uid, gid, groups, env if user else {})


def parse_rlimit(value: str) -> tuple[int, int]:
    """A Limit*= value: "N", "soft:hard", "infinity", sizes with K/M/G/T/P/E (1024-based). ValueError if bad."""
    def one(text: str) -> int:
        text = text.strip()
        if text == "infinity":
            return resource.RLIM_INFINITY
        match = re.fullmatch(r"(\d+)\s*([KMGTPE]?)", text)
        if not match:
            raise ValueError(f"bad limit {value!r}")
        return int(match.group(1)) * SIZE_SUFFIXES.get(match.group(2), 1)

    soft, _, hard = value.partition(":")
    return one(soft), one(hard) if hard else one(soft)


def unit_rlimits(unit: dict[str, list[str]]) -> dict[int, tuple[int, int]]:
    limits = {}
    for key in unit:
        section, _, name = key.partition(".")
        if section == "Service" and name.startswith("Limit") and name[5:] in RLIMITS and unit[key]:
            try:
                limits[RLIMITS[name[5:]]] = parse_rlimit(unit[key][-1])
            except ValueError as exc:
                log(f"{name}: {exc}; ignored")
    return limits


def make_unit_directories(name: str, unit: dict[str, list[str]], creds: Credentials | None) -> dict[str, str]:
    """RuntimeDirectory= and its kin: made (parents root's, 0755), owned by User/Group, their mode set.
    Returns the variables systemd sets for them."""
    env = {}
    for setting, (base, variable) in UNIT_DIRECTORIES.items():
        paths = [os.path.join(base, d) for d in words(unit, f"Service.{setting}")]
        mode = int(last(unit, f"Service.{setting}Mode", "0755"), 8)
        for path in paths:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            os.makedirs(path, exist_ok=True)
            if creds is not None:
                os.chown(path, creds.uid, creds.gid)
            os.chmod(path, mode)
        if paths:
            env[variable] = ":".join(paths)
            log(f"{name}: {setting} {' '.join(paths)} ({oct(mode)[2:].zfill(4)})")
    return env


def preexec(creds: Credentials | None, limits: dict[int, tuple[int, int]], umask: int | None):
    """What runs in the child before exec: limits first (raising a hard limit needs root), then groups, gid, uid."""
    def setup() -> None:
        for which, (soft, hard) in limits.items():
            try:
                resource.setrlimit(which, (soft, hard))
            except (ValueError, OSError):
                pass  # above what the kernel allows (fs.nr_open): keep the inherited one, as a clamp would
        if umask is not None:
            os.umask(umask)
        if creds is not None:
            os.setgroups(creds.groups)
            os.setgid(creds.gid)
            os.setuid(creds.uid)
    return setup


# --- starting units --------------------------------------------------------------------------------

def start_unit(name: str, unit: dict[str, list[str]]) -> int | None:
    """Start the unit as systemd would; its main PID (0: a oneshot that ran), None where it did not start."""
    unmet = unmet_conditions(unit)
    if unmet:
        log(f"{name}: condition not met ({'; '.join(unmet)}); skipped")
        return None
    for unknown in unknown_conditions(unit):
        log(f"{name}: {unknown}= is not supported here; taken as met")
    try:
        creds = unit_credentials(unit)
    except KeyError as exc:
        log(f"{name}: failed: no {exc.args[0]} (User=/Group=)")
        return None
    env = unit_environment(unit)
    if creds is not None:
        env.update(creds.env)
    try:
        env.update(make_unit_directories(name, unit, creds))
    except OSError as exc:
        log(f"{name}: failed to make its directories: {exc}")
        return None
    limits = unit_rlimits(unit)
    umask = int(last(unit, "Service.UMask", "0022"), 8)
    cwd = last(unit, "Service.WorkingDirectory")
    cwd_optional = cwd is not None and cwd.startswith("-")
    cwd = (cwd or "/").lstrip("-")
    if cwd == "~":
        cwd = env.get("HOME", "/")
    if not os.path.isdir(cwd):
        if not cwd_optional:
            log(f"{name}: failed: WorkingDirectory={cwd} does not exist")
            return None
        cwd = "/"
    kind = last(unit, "Service.Type", "simple")
    main_pid: int | None = 0
    steps = [(key, line) for key in ("ExecStartPre", "ExecStart", "ExecStartPost")
             for line in unit.get(f"Service.{key}", [])]
    for key, line in steps:
        argv, ignore_failure = command_argv(line, env)
        prefixes = exec_prefixes(line)
        as_root = "+" in prefixes or "!" in prefixes
        setup = preexec(None if as_root else creds, limits, umask)
        executable = None
        if "@" in prefixes and len(argv) > 1:
            executable, argv = argv[0], argv[1:]
        if key == "ExecStart" and kind not in WAITED_TYPES:
            pids: list[int] = []
            result = spawn(argv, env, LOG, preexec_fn=setup, cwd=cwd, executable=executable, started=pids)
            log(f"{name}: started {shlex.join(argv)}{as_user(creds, as_root)}"
                + (f": {result}" if result else ""))
            main_pid = pids[0] if pids else None
            continue
        rc = spawn(argv, env, LOG, wait=True, preexec_fn=setup, cwd=cwd, executable=executable)
        log(f"{name}: {key} {shlex.join(argv)}{as_user(creds, as_root)} -> {rc}")
        if rc != 0 and not ignore_failure:
            log(f"{name}: failed")
            return None
    pidfile = last(unit, "Service.PIDFile")
    if kind == "forking" and pidfile:
        try:
            with open(pidfile) as fh:
                main = fh.read().strip()
            log(f"{name}: running, main PID {main} ({pidfile})")
            main_pid = int(main) if main.isdigit() else main_pid
        except OSError:
            log(f"{name}: PID file {pidfile} not readable after start; the daemon may have died")
    return main_pid


def as_user(creds: Credentials | None, as_root: bool) -> str:
    return "" if creds is None or as_root else f" (uid {creds.uid}, gid {creds.gid})"


def spawn(argv: list[str], env: dict[str, str], output: str, wait: bool = False, preexec_fn=None,
          cwd: str | None = None, executable: str | None = None, started: list[int] | None = None) -> int | str | None:
    """Start argv with its output appended to a log file; with wait, its exit status (or why it did not run).
    started: gets the process's pid (the leader of its own session)."""
    with open(output, "a") as out:
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=preexec_fn, cwd=cwd, executable=executable)
            if started is not None:
                started.append(proc.pid)
            return proc.wait(timeout=90) if wait else None
        except (OSError, subprocess.SubprocessError) as exc:
            return f"error ({exc})"


# --- systemctl, where the node's spec says systemd (provision_custom.lab.systemd) -----------------------------

def systemd_node() -> bool:
    return os.path.exists(SYSTEMD_MARK)


def unit_name(word: str) -> str:
    return word if "." in word else f"{word}.service"


def record(name: str, main_pid: int | None) -> None:
    """A started unit's main PID (0: a oneshot that ran) in UNIT_STATE, which is-active and stop read."""
    os.makedirs(UNIT_STATE, exist_ok=True)
    path = os.path.join(UNIT_STATE, f"{name}.pid")
    if main_pid is None:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path, "w") as fh:
        fh.write(f"{main_pid}\n")


def main_pid_of(name: str) -> int | None:
    try:
        with open(os.path.join(UNIT_STATE, f"{name}.pid")) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except (OSError, IndexError):
        return False


def active(name: str) -> bool:
    pid = main_pid_of(name)
    return pid is not None and (pid == 0 or alive(pid))


def stop(name: str) -> None:
    """SIGTERM to the unit's process group (each started in a session of its own), SIGKILL after 10 s."""
    pid = main_pid_of(name)
    record(name, None)
    if not pid or not alive(pid):
        return
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pid, sig)
        except OSError:
            return
        deadline = time.monotonic() + wait
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not alive(pid):
            return


def start(name: str, verb: str = "start") -> int:
    """systemctl start (or the start of VERB): nothing where it runs; else its unit file with drop-ins started, as
    at boot."""
    if active(name):
        return 0
    path = unit_file(os.path.join(UNIT_DIRS[0], name))
    if path is None:
        print(f"Failed to {verb} {name}: Unit {name} not found.", file=sys.stderr)
        return 5
    main_pid = start_unit(name, parse_unit(path, dropin_files(name)))
    record(name, main_pid)
    if main_pid is None:
        print(f"Job for {name} failed because the control process exited with error code.\n"
              f"See \"systemctl status {name}\" and \"journalctl -xeu {name}\" for details.", file=sys.stderr)
        return 1
    return 0


def systemctl(argv: list[str]) -> int:
    """systemctl as it answers where systemd runs, for what the lab's units need: start, stop, restart (and
    try-restart, reload-or-restart), is-active, enable/disable --now, daemon-reload, reboot; anything else is the
    node's own systemctl, offline (SYSTEMD_OFFLINE=1: enable, disable, is-enabled read and write the unit links)."""
    options = [a for a in argv if a.startswith("-")]
    words = [a for a in argv if not a.startswith("-")]
    verb, names = (words[0] if words else ""), [unit_name(w) for w in words[1:]]
    quiet = "--quiet" in options or "-q" in options
    if verb in ("start", "restart", "try-restart", "reload-or-restart", "stop"):
        code = 0
        for name in names:
            if verb == "try-restart" and not active(name):
                continue  # try-restart leaves a stopped unit stopped
            if verb != "start":
                stop(name)
            if verb != "stop":
                code = start(name, verb) or code
        return code
    if verb == "is-active":
        states = ["active" if active(name) else "inactive" for name in names]
        if not quiet:
            print("\n".join(states))
        return 0 if all(state == "active" for state in states) else 3
    if verb in ("daemon-reload", "daemon-reexec", "reset-failed"):
        return 0
    if verb in ("reboot", "poweroff", "halt"):  # reboot(2) itself, which needs no systemd (-ff), never offline:
        if verb == "reboot" and "--force" not in options and "-f" not in options:  # that ignores it ("in chroot")
            os.execv(REBOOT, [REBOOT])  # the node's own (node.py): sync, then systemctl reboot -ff
        os.execv(REAL_SYSTEMCTL, [REAL_SYSTEMCTL, *argv])
    if verb in ("enable", "disable") and "--now" in options:
        offline = [a for a in argv if a != "--now"]
        code = subprocess.run([REAL_SYSTEMCTL, *offline], env={**os.environ, "SYSTEMD_OFFLINE": "1"}).returncode
        return code or systemctl(["start" if verb == "enable" else "stop", *words[1:]])
    os.execve(REAL_SYSTEMCTL, [REAL_SYSTEMCTL, *argv], {**os.environ, "SYSTEMD_OFFLINE": "1"})
    return 1  # not reached


# --- the machine ---------------------------------------------------------------------------------

def mount_cgroups(root: str = CGROUP_ROOT, controllers: tuple[str, ...] = CGROUP_CONTROLLERS) -> list[str]:
    """cgroup v1 as a real machine has it: a tmpfs at root, one hierarchy per entry ("a,b": both in one,
    with a and b as links to it; when the kernel has them apart, each on its own). Best effort: returns
    (and logs) what could not be mounted."""
    failed = []
    result = run_quiet(["mount", "-t", "tmpfs", "-o", "nosuid,nodev,noexec,mode=0755", "cgroup", root])
    if result:
        log(f"cgroups: tmpfs on {root}: {result}; no controllers")
        return list(controllers)
    mounted = []
    for entry in controllers:
        why = mount_controller(root, entry)
        if why is None:
            mounted.append(entry)
            for part in entry.split(",") if "," in entry else []:
                os.symlink(entry, os.path.join(root, part))
            continue
        parts = entry.split(",")
        if len(parts) == 1:
            failed.append(entry)
            log(f"cgroups: {entry}: {why}")
            continue
        log(f"cgroups: {entry} as one hierarchy: {why}; each on its own")  # the kernel holds them apart
        for part in parts:
            why = mount_controller(root, part)
            if why is None:
                mounted.append(part)
            else:
                failed.append(part)
                log(f"cgroups: {part}: {why}")
    log(f"cgroups (v1) mounted: {' '.join(mounted) or 'none'}" + (f"; failed: {' '.join(failed)}" if failed else ""))
    return failed


def mount_controller(root: str, controllers: str) -> str | None:
    """Mount one v1 hierarchy at root/controllers; None when done, else why not (the directory removed)."""
    path = os.path.join(root, controllers)
    os.makedirs(path, exist_ok=True)
    why = run_quiet(["mount", "-t", "cgroup", "-o", f"nosuid,nodev,noexec,{controllers}", "cgroup", path])
    if why:
        os.rmdir(path)
    return why


def run_quiet(argv: list[str]) -> str | None:
    """None when argv succeeded, else its message."""
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]


def gpu_count(config_path: str = GPU_CONFIG, state_path: str = GPU_STATE) -> int:
    """GPUs the driver finds at boot: those configured, less any the simulator has as gone (not enumerated)."""
    try:
        with open(config_path) as fh:
            total = sum(int(g.get("count", 0)) for g in json.load(fh).get("gpus", []))
    except (OSError, ValueError, AttributeError, TypeError):
        return 0
    try:
        with open(state_path) as fh:
            records = json.load(fh).get("gpus", [])
    except (OSError, ValueError, AttributeError):
        return total
    if isinstance(records, list) and len(records) == total:
        return total - sum(1 for r in records if isinstance(r, dict) and r.get("gone"))
    return total


def make_gpu_devices(count: int, dev: str = "/dev") -> list[str]:
    """/dev/nvidiactl and /dev/nvidia0..count-1 as the driver makes them: char 195, mode 0666."""
    made = []
    for name, minor in [("nvidiactl", NVIDIACTL_MINOR), *((f"nvidia{i}", i) for i in range(count))]:
        path = os.path.join(dev, name)
        if not os.path.exists(path):
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
        os.chmod(path, 0o666)  # mknod's mode passes through the umask
        made.append(path)
    return made


def driver_devices() -> None:
    if not os.path.exists(DRIVER_LOADED):
        log("no NVIDIA driver loaded: no /dev/nvidia*")
        return
    try:
        made = make_gpu_devices(gpu_count())
        log(f"GPU devices: {' '.join(made)}")
    except OSError as exc:
        log(f"GPU devices: {exc}")


def modules_to_load(dirs: tuple[str, ...] = MODULES_LOAD_DIRS) -> list[str]:
    """The module names of every modules-load.d/*.conf (Debian's modules.conf is a link to /etc/modules), files in
    name order across the directories, each name once; blank lines and comments ("#", ";") skipped."""
    files: dict[str, str] = {}
    for directory in reversed(dirs):
        for path in glob.glob(os.path.join(directory, "*.conf")):
            files[os.path.basename(path)] = path
    names: list[str] = []
    for name in sorted(files):
        try:
            with open(files[name]) as fh:
                lines = fh.read().splitlines()
        except OSError as exc:
            log(f"modules-load: {files[name]}: {exc}")
            continue
        names += [line.strip() for line in lines if line.strip() and line.strip()[0] not in "#;"]
    return list(dict.fromkeys(names))


def load_modules() -> None:
    """What systemd-modules-load does at boot: each module named there probed (its install commands run: the node's
    kmod), logged in its words."""
    for name in modules_to_load():
        try:
            proc = subprocess.run(["modprobe", name], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=30, env=ENV)
        except (OSError, subprocess.SubprocessError) as exc:
            log(f"systemd-modules-load: Failed to insert module '{name}': {exc}")
            continue
        if proc.returncode == 0:
            log(f"systemd-modules-load: Inserted module '{name.replace('-', '_')}'")
        else:
            log(f"systemd-modules-load: Failed to insert module '{name}': {proc.stderr.strip() or proc.returncode}")


def power_on_gpus() -> None:
    """The GPUs' volatile settings (persistence, power limits, clocks) are gone after a power cycle, and the
    driver on disk loads (a driver package installed since the last boot: this one's)."""
    if os.path.exists(GPUSIM):
        log(f"GPUs powered on (simulator reboot -> {spawn([GPUSIM, 'reboot'], ENV, LOG, True)})")


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 ignores signals it has no handler for
    os.umask(0o022)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    os.makedirs("/run/lock", mode=0o1777, exist_ok=True)
    log(f"booting {os.uname().nodename}")
    mount_cgroups()
    power_on_gpus()
    driver_devices()  # those of the driver that loaded
    load_modules()  # after the driver: nvidia_peermem rests on it
    systemd = systemd_node()
    if systemd:
        os.makedirs("/run/systemd/system", exist_ok=True)
    units = enabled_units()
    for name in boot_order(units):
        try:
            main_pid = start_unit(name, units[name])
            if systemd:
                record(name, main_pid)
        except Exception as exc:  # one bad unit must not stop the boot (sshd below)
            log(f"{name}: failed: {type(exc).__name__}: {exc}")
    spawn(["/usr/sbin/sshd", "-D", "-e"], ENV, "/var/log/sshd.log")
    log("sshd started; boot complete")
    while True:  # reap everything: orphans of the node are re-parented to us
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--systemctl"]:
        QUIET_LOG = True
        sys.exit(systemctl(sys.argv[2:]))
    main()

"""PID 1 of a lab node (runs inside the node, with the node's own python3; stdlib only).

A boot, in the order a machine does it: the GPUs come up in their power-on
state, the units enabled into a target run (their ExecStartPre, ExecStart,
ExecStartPost, ordered by After=/Before=, as systemd would at boot), sshd
starts. Then it reaps orphans until the node is powered off (SIGKILL from the
host; being PID 1, everything in the node dies with it).

Units are found where `systemctl enable` puts them:
/etc/systemd/system/*.target.wants/*.service. Supported: Type (oneshot and
forking are waited for, others run in the background), Environment=,
EnvironmentFile=, $VAR/${VAR} in commands, the "-" prefix (failure ignored).
Not supported: Requires=/Wants= pulling in other units, User=, specifiers.
systemd itself never runs: /run/systemd/system does not exist in a node.
"""

from __future__ import annotations

import glob
import graphlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time

GPUSIM = "/usr/lib/provision-lab/gpusim"  # the simulator's own commands (node.py installs it)
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
LAB_OWN_UNITS = {"ssh.service", "sshd.service"}  # the lab starts sshd itself, below
WAITED_TYPES = {"oneshot", "forking"}
LOG = "/var/log/provision-lab-boot.log"
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}


def log(message: str) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    with open(LOG, "a") as fh:
        fh.write(line)


def parse_unit(path: str) -> dict[str, list[str]]:
    """"Section.Key" -> values, in order; an empty assignment resets the list, as in systemd."""
    values: dict[str, list[str]] = {}
    section = ""
    with open(path) as fh:
        text = re.sub(r"\\\n", " ", fh.read())  # line continuations
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


def enabled_units() -> dict[str, dict[str, list[str]]]:
    units = {}
    for link in sorted(glob.glob("/etc/systemd/system/*.target.wants/*.service")):
        name = os.path.basename(link)
        path = unit_file(link)
        if name in LAB_OWN_UNITS or name in units:
            continue
        if path is None:
            log(f"{name}: enabled but its unit file is missing; skipped")
            continue
        units[name] = parse_unit(path)
    return units


def boot_order(units: dict[str, dict[str, list[str]]]) -> list[str]:
    graph = graphlib.TopologicalSorter()
    for name, unit in units.items():
        graph.add(name)
        for other in " ".join(unit.get("Unit.After", [])).split():
            if other in units:
                graph.add(name, other)
        for other in " ".join(unit.get("Unit.Before", [])).split():
            if other in units:
                graph.add(other, name)
    graph.prepare()
    order = []
    while graph.is_active():
        ready = sorted(graph.get_ready())
        order += ready
        graph.done(*ready)
    return order


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
        env.update(item.split("=", 1) for item in shlex.split(assignments) if "=" in item)
    return env


def command_argv(line: str, env: dict[str, str]) -> tuple[list[str], bool]:
    """(argv, failure ignored) of one Exec line: prefixes stripped, variables expanded as systemd does."""
    prefixes = re.match(r"^[-@:+!]*", line).group()
    argv = []
    for word in shlex.split(line[len(prefixes):]):
        whole = re.fullmatch(r"\$(\w+)", word)
        if whole:  # $VAR alone: split into words
            argv += env.get(whole.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\$|\$\{(\w+)\}", lambda m: env.get(m.group(1), "") if m.group(1) else "$", word))
    return argv, "-" in prefixes


def start_unit(name: str, unit: dict[str, list[str]]) -> None:
    env = unit_environment(unit)
    kind = (unit.get("Service.Type") or ["simple"])[-1]
    steps = [(key, line) for key in ("ExecStartPre", "ExecStart", "ExecStartPost")
             for line in unit.get(f"Service.{key}", [])]
    for key, line in steps:
        argv, ignore_failure = command_argv(line, env)
        if key == "ExecStart" and kind not in WAITED_TYPES:
            spawn(argv, env, LOG)
            log(f"{name}: started {shlex.join(argv)}")
            continue
        rc = spawn(argv, env, LOG, wait=True)
        log(f"{name}: {key} {shlex.join(argv)} -> {rc}")
        if rc != 0 and not ignore_failure:
            log(f"{name}: failed")
            return


def spawn(argv: list[str], env: dict[str, str], output: str, wait: bool = False) -> int | str | None:
    """Start argv with its output appended to a log file; with wait, its exit status (or why it did not run)."""
    with open(output, "a") as out:
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            return proc.wait(timeout=90) if wait else None
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"error ({exc})"


def power_on_gpus() -> None:
    """The GPUs' volatile settings (persistence, power limits, clocks) are gone after a power cycle."""
    if os.path.exists(GPUSIM):
        log(f"GPUs powered on (simulator reboot -> {spawn([GPUSIM, 'reboot'], ENV, LOG, True)})")


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 ignores signals it has no handler for
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    os.makedirs("/run/lock", mode=0o1777, exist_ok=True)
    log(f"booting {os.uname().nodename}")
    power_on_gpus()
    units = enabled_units()
    for name in boot_order(units):
        start_unit(name, units[name])
    spawn(["/usr/sbin/sshd", "-D", "-e"], ENV, "/var/log/sshd.log")
    log("sshd started; boot complete")
    while True:  # reap everything: orphans of the node are re-parented to us
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(1)


if __name__ == "__main__":
    main()

"""Where the facts batch spends its node-side time: wall, CPU and processes of each section (issue 28).

The batch is the very script the engine sends: an Engine whose connection is this machine (a sandbox, below)
reads the host and the script is taken from that call, so its sections and its reads (the files, units and
packages of the selected tasks: Reads.union of task.reads, as Engine.gather computes them) are a real run's.
By default the host is the one node of the inventory benchmarks/apply_scale.py writes (the lab's + the peers'
WORK: persistence, 200 W, clocks 877,1005, NCCL), with the shipped site playbook, as its no-op apply reads it.

The node is this machine, made to look like a converged lab node:
- nvidia-smi and dmesg are the lab's GPU simulator, installed as a lab node has it (one zipapp run by
  /usr/bin/python3 -S, provision_lab/simzip.py), 4x V100 by default, its state in the sandbox;
- the files the tasks read live under SANDBOX/root (each path P read as SANDBOX/root/P, the systemd unit
  through `systemctl --root`): the same commands on other paths;
- the sandbox is first converged by the tasks' own plans (GPU setters run against the simulator, files written
  with the engine's atomic write, the unit enabled with `systemctl --root`, the supported clocks cached as
  the engine's upkeep step does), so the batch measured is the one a no-op apply reads.

Then each section runs on its own, as `sh -c 'exec 2>&1; <framed section>'` (a section that reads a variable
an earlier one kept, such as $q, gets its value assigned first: a builtin), REPEAT times; os.wait4's rusage
gives the CPU of the sh and every process it waited for. `sh -c 'exec 2>&1'` is the baseline (one sh start,
which the batch pays once) and is subtracted from each section, so a section's numbers include its framing (the
subshell each section runs in, a fork, and its markers). The whole batch also runs as one script,
to confirm the sum. Processes are counted once per section under strace -f (clone/fork/vfork that made a
process, execve that succeeded), and the simulator's calls recorded (nvidia-smi, dmesg); each distinct call is
then timed alone, which gives the simulator's share of each section.

THE SIMULATOR'S TIMES ARE NOT REAL nvidia-smi TIMES: it is Python (an interpreter start and the package's
import per call). A real nvidia-smi call is commonly 0.1-0.5 s of wall (NVML init; more without persistence
mode), its CPU not measured here (no GPU on this machine); a real dmesg is a few ms. The columns "sim calls" and "sim ms"
say how much of each section is the simulator; the rest is the batch's own cost, which a real node pays the
same way.

Which sections a no-op apply needs: the facts parsed without one section are planned again by every
selected task (and the engine's upkeep and reboot_pending): "plan differs" names the tasks whose plan (or
the engine's outcome) changes without it, in this state. "fields" are the HostFacts fields the section
sets, "read by" the tasks that read those fields (their attribute reads traced while planning): a section
whose fields no task reads is read for nothing in this run.

    sudo .venv/bin/python benchmarks/facts_sections.py [--purpose apply|facts|verify] [--repeat 20]
        [--inventory FILE --host NAME] [--playbook site] [--tags T] [--skip-tags T] [--json FILE]

Needs strace for the process counts (apt-get install strace); without it those columns say "-".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import yaml  # noqa: E402

from peers.run import FILES as PEER_FILES, SMI_QUERY, UNIT as PEER_UNIT, WORK  # noqa: E402
from provision.capabilities.registry import EXTENSIONS, FACTS  # noqa: E402
from provision.commands.playbook import load_playbook, select_tasks  # noqa: E402
from provision.core import hostlock  # noqa: E402
from provision.core.apply import steps  # noqa: E402
from provision.core.connection import CommandResult, LocalConnection  # noqa: E402
from provision.core.facts import FactSection, Section, build_script, split_sections  # noqa: E402
from provision.core.resources import playbook_path, templates_dir  # noqa: E402
from provision.core.run import Engine, HostState, RunOptions  # noqa: E402
from provision.inventory.load import load_inventory  # noqa: E402
from provision_lab import simzip  # noqa: E402
from provision_lab.spec import default_spec  # noqa: E402

PURPOSES = ("apply", "facts", "verify")
SIMULATED: dict[str, str] = {}  # "dir": where the simulator's programs are (Sandbox)
NODE_PYTHON = "/usr/bin/python3"  # what runs the simulator on a lab node (simzip.NODE_PYTHON)


# --- the host and its tasks ---------------------------------------------------------------------------------

def local_nic() -> str:
    """This machine's first interface that is up, other than lo: the sandbox node's NCCL interface."""
    for path in sorted(Path("/sys/class/net").iterdir()):
        state = (path / "operstate").read_text().strip() if (path / "operstate").exists() else ""
        if path.name != "lo" and state == "up":
            return path.name
    return "lo"


def benchmark_inventory(workdir: Path, nccl_ifname: str) -> Path:
    """benchmarks/apply_scale.py's inventory for a 1-node lab (peers.provision_inventory without a running lab),
    NCCL's interface one this machine has (the lab's ens803f* are in the lab's namespaces, not here)."""
    spec = default_spec(1)
    ssh_config = workdir / "ssh_config"
    ssh_config.write_text("")
    tree = spec.inventory({n.name: "10.77.0.1" for n in spec.nodes}, str(ssh_config))
    group = tree["all"]["children"]["nodes"]
    group["vars"]["provision_gpu"].update(persistence=WORK["persistence"], power_limit=WORK["power_limit"],
                                clocks=dict(WORK["clocks"]))
    group["vars"]["provision_nccl"] = dict(WORK["nccl"], socket_ifname=nccl_ifname)
    path = workdir / "inventory.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def tasks_for(purpose: str, playbook: Path, tags: set[str], skip_tags: set[str]):
    """The tasks each command gives its Engine (cli.py): apply the selected ones, verify the playbook's, facts none."""
    if purpose == "facts":
        return []
    loaded = load_playbook(playbook, templates_dir(None))
    return select_tasks(loaded, tags, skip_tags, str(playbook)) if purpose == "apply" else loaded


# --- the sandbox node ---------------------------------------------------------------------------------------

class Sandbox:
    """This machine as a lab node: the simulator on PATH, its state and provision's records in the sandbox, the
    tasks' files under root/."""

    def __init__(self, workdir: Path, gpus: list[dict], driver_version: str):
        self.dir = workdir
        self.root = workdir / "root"
        self.bin = workdir / "bin"
        self.bin.mkdir(parents=True)
        SIMULATED["dir"] = str(self.bin)
        self.root.mkdir()
        self.paths: list[str] = []
        self._pattern: re.Pattern | None = None
        zipapp = workdir / "gpusim.pyz"
        zipapp.write_bytes(simzip.zipapp())
        for name in ("nvidia-smi", "dmesg"):  # no nvidia-persistenced: a default lab node has none
            program = self.bin / name
            program.write_text(simzip.sim_wrapper(name, str(zipapp), NODE_PYTHON))
            program.chmod(0o755)
        env = {
            "NVIDIA_SIM_CONFIG": workdir / "sim" / "config.json", "NVIDIA_SIM_STATE": workdir / "sim" / "state.json",
            "NVIDIA_SIM_KMSG": workdir / "sim" / "kern.log", "NVIDIA_SIM_DMESG": workdir / "sim" / "dmesg",
            "NVIDIA_SIM_RUNDIR": workdir / "sim" / "run", "NVIDIA_SIM_LIBRARY": workdir / "sim" / "nvml-version",
            "PROVISION_CLOCK_RECORDS": workdir / "run" / "gpu-clocks",
            "PROVISION_CLOCK_CACHE": workdir / "cache" / "supported-clocks",
            "PROVISION_GPU_LAYOUT": workdir / "var" / "gpu-layout",
            "PROVISION_BMC_SEL_RECORD": workdir / "var" / "bmc-sel",
            "XDG_STATE_HOME": workdir / "state",
        }
        os.environ.update({k: str(v) for k, v in env.items()})
        os.environ.pop("NVIDIA_SIM_UID", None)
        os.environ["PATH"] = f"{self.bin}:{os.environ['PATH']}"
        (workdir / "sim").mkdir()
        config = {"driver_version": driver_version, "gpus": gpus, "numa_nodes": 1, "nics": []}
        Path(os.environ["NVIDIA_SIM_CONFIG"]).write_text(json.dumps(config, indent=2) + "\n")
        Path(os.environ["NVIDIA_SIM_LIBRARY"]).write_text(driver_version + "\n")
        subprocess.run([NODE_PYTHON, "-S", str(zipapp), "init"], check=True, capture_output=True)

    def map_paths(self, paths) -> None:
        """The paths read (files) to keep under root/."""
        self.paths = sorted(set(self.paths) | set(paths), key=len, reverse=True)
        for path in self.paths:
            (self.root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        self._pattern = re.compile(r"(?<![\w/.:-])(" + "|".join(re.escape(p) for p in self.paths) + r")(?![\w/-])") \
            if self.paths else None

    def text(self, text: str) -> str:
        """A snippet or argv word with the read paths under root/ and `systemctl is-enabled` there too."""
        if self._pattern is not None:
            text = self._pattern.sub(lambda m: f"{self.root}{m.group(1)}", text)
        return text.replace("systemctl is-enabled ", f"systemctl --root={self.root} is-enabled ")


class SandboxConnection(LocalConnection):
    """This machine through the sandbox: the engine's facts batch is kept (as sent) and run with the paths
    mapped; the tasks' commands run against the simulator and root/; anything else is refused, not run."""

    def __init__(self, name: str, sandbox: Sandbox):
        super().__init__(name)
        self.sandbox = sandbox
        self.scripts: list[str] = []
        self.ran: list[str] = []

    def run_script(self, script: str, timeout: float | None = None) -> CommandResult:
        self.scripts.append(script)
        return super().run_script(script, timeout)

    def run(self, argv, *, sudo=False, stdin=None, timeout=None):
        argv = [self.sandbox.text(word) for word in argv]
        if argv[0] == "systemctl":
            verb = next((w for w in argv[1:] if not w.startswith("-")), "")
            if verb not in ("enable", "disable", "is-enabled", "reenable"):
                self.ran.append(f"skipped (no systemd here): {shlex.join(argv)}")
                return CommandResult(argv, 0, "")
            argv = ["systemctl", f"--root={self.sandbox.root}", *argv[1:]]
        elif not (argv[0] == "nvidia-smi" or (argv[0] == "sh" and argv[1] == "-c")):
            self.ran.append(f"refused (not run in the sandbox): {shlex.join(argv)}")
            return CommandResult(argv, 1, "", "not run in the benchmark's sandbox")
        if not (argv[0] == "sh" and "@@" in argv[2] and "exec 2>&1" in argv[2][:20]):
            self.ran.append(shlex.join(argv)[:160])
        return super().run(argv, sudo=sudo, stdin=stdin, timeout=timeout)


def engine(tasks, purpose: str, conn: SandboxConnection) -> Engine:
    return Engine(tasks, RunOptions(command=purpose, reading=purpose), lambda host: conn, EXTENSIONS)


def read(eng: Engine, host) -> HostState:
    state = HostState(host)
    eng.gather(state)
    if state.facts is None:
        raise SystemExit(f"reading the sandbox failed: {state.result}")
    eng.see_cluster([state])
    return state


def run_steps(conn: SandboxConnection, todo) -> str | None:
    """The steps one command each (the sandbox maps each one's paths; the engine sends them as one script)."""
    for step in todo:
        outcome = conn.run(step.argv, sudo=True, stdin=None if step.stdin is None else step.stdin.decode(),
                           timeout=120)
        if not outcome.ok:
            return step.failed(outcome.rc, outcome.output)
    return None


def converge(host, tasks, conn: SandboxConnection, passes: int = 3) -> list[str]:
    """Apply the tasks' plans to the sandbox until a pass changes nothing (the engine's upkeep steps included);
    the changes still planned after the last pass (empty: the sandbox is a no-op)."""
    eng = engine(tasks, "apply", conn)
    for _ in range(passes):
        state = read(eng, host)
        changed = 0
        for task in tasks:
            plan = task.plan(host, state.facts)
            for change in plan.changes:
                error = run_steps(conn, steps(change, "20261101T000000Z", 3))
                changed += 1
                if error:
                    conn.ran.append(f"  -> {task.name}: {change.what} on {change.target}: {error}")
            if plan.changes:
                eng.read_into(state, lock=False)
        error = run_steps(conn, EXTENSIONS.upkeep(state.facts))
        if error:
            conn.ran.append(f"upkeep: {error}")
        if not changed:
            return []
    state = read(eng, host)
    return [f"{t.name}: {c.what} on {c.target}" for t in tasks for c in t.plan(host, state.facts).changes]


# --- measuring ----------------------------------------------------------------------------------------------

def run_once(script: str) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user+sys of sh and every process it waited for) and stdout of `sh -c script`."""
    started = time.perf_counter()
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    return wall, usage.ru_utime + usage.ru_stime, out.decode("utf-8", "replace")


CALL = re.compile(r"^(\d+)\s+(clone3?|fork|vfork|execve)\((.*)")
RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (clone3?|fork|vfork|execve) resumed>(.*)")
EXECVE = re.compile(r'^"([^"]*)", \[(.*?)\](?:, |\))')
MADE = re.compile(r"= [1-9]\d*$")  # a clone's child pid
EXECUTED = re.compile(r"= 0$")


def processes(script: str, workdir: Path) -> dict | None:
    """Processes the script makes: forks (clone/fork/vfork that made a process, threads aside), successful
    execs (the sh itself aside) and the argv of each simulator program run (nvidia-smi, dmesg); None without
    strace."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    out = workdir / "strace.out"
    subprocess.run([strace, "-f", "-qq", "-s", "4096", "-e", "trace=clone,clone3,fork,vfork,execve",
                    "-o", str(out), "sh", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   stdin=subprocess.DEVNULL)
    forks, execs, smi, programs = 0, [], [], {}
    pending: dict[str, str] = {}  # pid -> the args of its unfinished call
    for line in out.read_text(errors="replace").splitlines():
        if m := CALL.match(line):
            pid, call, args = m.groups()
            if args.endswith("<unfinished ...>"):
                pending[pid] = args
                continue
        elif m := RESUMED.match(line):
            pid, call, rest = m.groups()
            args = pending.pop(pid, "").removesuffix("<unfinished ...>") + rest
        else:
            continue
        args = args.strip()
        if call == "execve":
            exe = EXECVE.match(args)
            if EXECUTED.search(args) and exe:
                execs.append(exe.group(1))
                if SIMULATED.get("dir") and os.path.dirname(exe.group(1)) == SIMULATED["dir"]:
                    smi.append(shlex.join([os.path.basename(exe.group(1)), *json.loads(f"[{exe.group(2)}]")[1:]]))
        elif "CLONE_THREAD" not in args and MADE.search(args):
            forks += 1
    execs = execs[1:]  # the sh -c itself
    for path in execs:
        programs[os.path.basename(path)] = programs.get(os.path.basename(path), 0) + 1
    return {"forks": forks, "execs": len(execs), "programs": programs, "smi": smi}


def section_script(token: str, name: str, section: FactSection, kept: dict[str, str]) -> str:
    """One section as the batch frames it, after `exec 2>&1` and the variables earlier sections kept."""
    framed = build_script(token, {name: section}).split("\n", 1)[1]
    assigned = "".join(f"{var}={shlex.quote(value)}\n" for var, value in kept.items())
    return f"exec 2>&1\n{assigned}{framed}"


# --- what a no-op apply needs ------------------------------------------------------------------------------

class Traced:
    """A HostFacts whose attribute reads are recorded: "nvidia", "nvidia.gpus", "files[/etc/nccl.conf]", ..."""

    def __init__(self, obj, seen: set[str], prefix: str = ""):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_seen", seen)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name):
        value = getattr(self._obj, name)
        key = self._prefix + name
        self._seen.add(key)
        if not self._prefix and dataclasses.is_dataclass(value) and not isinstance(value, type):
            return Traced(value, self._seen, key + ".")
        if not self._prefix and isinstance(value, dict):
            return TracedDict(value, self._seen, key)
        return value


class TracedDict(dict):
    """A facts mapping (files, units, packages) whose keys looked up are recorded."""

    def __init__(self, data: dict, seen: set[str], name: str):
        super().__init__(data)
        self._seen, self._name = seen, name

    def _saw(self, key):
        self._seen.add(f"{self._name}[{key}]")

    def __getitem__(self, key):
        self._saw(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._saw(key)
        return super().get(key, default)

    def __contains__(self, key):
        self._saw(key)
        return super().__contains__(key)

    def __iter__(self):
        self._seen.add(f"{self._name}[*]")
        return super().__iter__()

    def items(self):
        self._seen.add(f"{self._name}[*]")
        return super().items()

    def values(self):
        self._seen.add(f"{self._name}[*]")
        return super().values()


def _plain(value):
    """A plan as comparable data: callables (verify, explain) left out."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not callable(getattr(value, f.name))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value if not callable(value) else None


def outcome(host, tasks, facts) -> dict[str, object]:
    """Each task's plan, and what the engine itself takes from the facts on a no-op (upkeep, reboot_pending)."""
    result = {t.name: _plain(t.plan(host, facts)) for t in tasks}
    result["(engine: reboot_pending)"] = EXTENSIONS.reboot_pending(host, facts)
    result["(engine: upkeep)"] = (facts.nvidia.supported_clocks_source, facts.nvidia.driver_version)
    return result


def differing(full, other) -> list[str]:
    """The HostFacts fields (one level into a dataclass field, keys of a mapping) that differ."""
    found = []
    for f in dataclasses.fields(full):
        a, b = getattr(full, f.name), getattr(other, f.name)
        if a == b:
            continue
        if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
            found += [f"{f.name}.{g.name}" for g in dataclasses.fields(a) if getattr(a, g.name) != getattr(b, g.name)]
        elif isinstance(a, dict) and isinstance(b, dict):
            found += [f"{f.name}[{k}]" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            found.append(f.name)
    return found


def needs(host, tasks, sections: dict[str, Section]) -> dict[str, dict]:
    """For each section: the HostFacts fields it sets (those that differ when it is left out, or when its exit
    status is the other one), the tasks that read them, and whose no-op plan differs without it."""
    full = FACTS.parse(sections)
    base = outcome(host, tasks, full)
    reads: dict[str, set[str]] = {}
    for task in tasks:
        seen: set[str] = set()
        try:
            task.plan(host, Traced(full, seen))
        except Exception as exc:  # a task that needs the real type: say so rather than guess
            seen.add(f"? ({type(exc).__name__})")
        reads[task.name] = seen
    for name, step in (("(engine: reboot_pending)", lambda f: EXTENSIONS.reboot_pending(host, f)),
                       ("(engine: upkeep)", lambda f: EXTENSIONS.upkeep(f))):
        seen = set()
        step(Traced(full, seen))
        reads[name] = seen
    found = {}
    for name, section in sections.items():
        without = FACTS.parse({k: v for k, v in sections.items() if k != name})
        flipped = FACTS.parse({**sections, name: Section(0 if section.rc else 1, section.output)})
        fields = sorted(set(differing(full, without)) | set(differing(full, flipped)))
        other = outcome(host, tasks, without)
        differs = [task for task in base if base[task] != other[task]]
        readers = sorted(task for task, got in reads.items()
                         if any(f in got or (f.startswith(("files[", "units[", "packages[")) and
                                             f.split("[")[0] + "[*]" in got) for f in fields))
        found[name] = {"fields": fields, "read_by_tasks": readers, "plan_differs": differs}
    found["(task reads)"] = {task: sorted(got) for task, got in reads.items()}
    return found


# --- the report ---------------------------------------------------------------------------------------------

def floors(sandbox: Sandbox) -> list[tuple[str, str]]:
    """The floors of apply_scale.py, run the same way: `true`, its floor+smi (the one nvidia-smi query), and the
    issue's floor+smi (that query + sha1 of two of the files + systemctl is-enabled)."""
    files = " ".join(shlex.quote(f"{sandbox.root}{p}") for p in PEER_FILES[:2])
    return [("floor: true", "true"),
            ("floor+smi (apply_scale.py: one nvidia-smi --query-gpu)", SMI_QUERY),
            ("floor+smi (issue 28: + sha1sum of 2 files + systemctl is-enabled)",
             f"{SMI_QUERY}; sha1sum {files}; systemctl --root={sandbox.root} is-enabled {PEER_UNIT}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--purpose", choices=PURPOSES, default="apply", help="whose batch to measure")
    parser.add_argument("--inventory", help="an inventory (default: apply_scale.py's, one node)")
    parser.add_argument("--host", help="its host to read (default: the first)")
    parser.add_argument("--playbook", default="site", help="a shipped playbook's name or a path (default: site)")
    parser.add_argument("--tags", default="", help="apply's --tags (comma-separated)")
    parser.add_argument("--skip-tags", default="", help="apply's --skip-tags")
    parser.add_argument("--gpus", default="v100-sxm2-16gb:4", help="the simulated GPUs, MODEL:COUNT[,MODEL:COUNT]")
    parser.add_argument("--nccl-ifname", help="the default inventory's provision_nccl.socket_ifname (default: this machine's "
                        "first interface up; the lab's ens803f is not here, and nccl-files would fail, writing nothing)")
    parser.add_argument("--repeat", type=int, default=20, help="runs per measurement (medians)")
    parser.add_argument("--no-converge", action="store_true", help="measure the sandbox as first read (no files, "
                        "GPUs at their defaults, no clocks cache)")
    parser.add_argument("--json", help="write the measurements here too")
    parser.add_argument("--keep", action="store_true", help="keep the sandbox (its path is printed)")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="provision-facts-sections-"))
    try:
        report(args, workdir)
    finally:
        if args.keep:
            print(f"sandbox kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def report(args, workdir: Path) -> None:
    from provision_lab.layout import DRIVER_VERSION
    gpus = [{"model": m, "count": int(n)} for m, _, n in (g.partition(":") for g in args.gpus.split(","))]
    sandbox = Sandbox(workdir / "sandbox", gpus, DRIVER_VERSION)
    inventory = args.inventory or str(benchmark_inventory(workdir, args.nccl_ifname or local_nic()))
    inv = load_inventory(inventory)
    hosts = inv.select(args.host)
    host = hosts[0]
    playbook = playbook_path(args.playbook)
    tags = {t for t in args.tags.split(",") if t}
    skip = {t for t in args.skip_tags.split(",") if t}
    tasks = {p: tasks_for(p, playbook, tags, skip) for p in PURPOSES}
    conn = SandboxConnection(host.name, sandbox)
    # The files every purpose's reads name, kept under root/ (read by a first gather: Engine.gather's Reads).
    from provision.core.facts import Reads
    sandbox.map_paths({p for ts in tasks.values() for p in Reads.union(t.reads(host) for t in ts).paths})

    left = [] if args.no_converge else converge(host, tasks["apply"], conn)
    final = read(engine(tasks["apply"], "apply", conn), host)
    statuses = {}
    for task in tasks["apply"]:
        plan = task.plan(host, final.facts)
        statuses[task.name] = ("skipped: " + plan.skipped if plan.skipped else "FAILED: " + plan.failed
                               if plan.failed else f"{len(plan.changes)} changes" if plan.changes else "ok")
    # The batches, as each command's Engine sends them (the last script each gather ran).
    batches: dict[str, str] = {}
    states = {}
    for purpose in PURPOSES:
        states[purpose] = read(engine(tasks[purpose], purpose, conn), host)
        batches[purpose] = conn.scripts[-1]
    # The same sections from the registry (with the reads each Engine computed), to time one by one: they must
    # make the very script the engine sent.
    names_in = {}
    for purpose in PURPOSES:
        token = re.search(r"@@([0-9a-f]+) ", batches[purpose]).group(1)
        # apply's first read also reads the host lock's generation (Engine.read_into)
        after = {"lock-generation": hostlock.generation_argv()} if purpose == "apply" else None
        sections = FACTS.sections(purpose, states[purpose].reads, after=after)
        if build_script(token, sections) != batches[purpose]:
            raise SystemExit(f"the registry's {purpose} sections do not make the script the engine sent: "
                             "update this benchmark")
        names_in[purpose] = set(sections)
    script = batches[args.purpose]
    token = re.search(r"@@([0-9a-f]+) ", script).group(1)
    sections = FACTS.sections(args.purpose, states[args.purpose].reads)
    # Paths mapped in the snippets only: the markers keep the sections' names.
    sections = {name: dataclasses.replace(s, snippet=sandbox.text(s.text())) for name, s in sections.items()}
    mapped = build_script(token, sections)

    whole_out = run_once(mapped)[2]
    outputs = split_sections(token, whole_out)
    missing = [n for n in sections if n not in outputs]
    if missing:
        raise SystemExit(f"sections missing from the batch's output: {missing}")

    # First the processes of each script (strace), which also names the simulator calls to time alone.
    baseline_script = "exec 2>&1\n"  # one sh start: what the whole batch pays once, not per section
    scripts, kept = {}, {}
    for name, section in sections.items():
        scripts[name] = section_script(token, name, section, kept)
        if section.keep:
            kept[section.keep] = outputs[name].output
    procs = {name: processes(text, workdir) for name, text in scripts.items()}
    smi_calls = sorted({call for p in procs.values() if p for call in p["smi"]})
    floor_scripts = floors(sandbox)
    jobs = {("baseline", ""): baseline_script, ("whole", ""): mapped,
            **{("section", n): t for n, t in scripts.items()},
            # Each distinct simulator call alone (its own exec, no sh around it): its share of the sections.
            **{("smi", c): f"exec {c} >/dev/null 2>&1" for c in smi_calls},
            ("python", ""): f"exec {NODE_PYTHON} -S -c pass",
            **{("floor", label): command for label, command in floor_scripts}}
    # Then the times, in rounds over every script, so that whatever else this machine does falls on all alike.
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    samples: dict[tuple, list] = {key: [] for key in jobs}
    for key, text in jobs.items():  # one warm-up run each (page cache, the simulator's zipapp)
        run_once(text)
    for _ in range(args.repeat):
        for key, text in jobs.items():
            samples[key].append(run_once(text)[:2])
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    times = {key: {"wall_ms": 1000 * statistics.median(w for w, _ in got),
                   "cpu_ms": 1000 * statistics.median(c for _, c in got)} for key, got in samples.items()}
    baseline, whole, python_start = times[("baseline", "")], times[("whole", "")], times[("python", "")]
    baseline_procs, whole_procs = processes(baseline_script, workdir), processes(mapped, workdir)
    smi_times = {c: times[("smi", c)] for c in smi_calls}
    capability = {s.name: r.parse.__module__.removeprefix("provision.").removesuffix(".facts")
                  for r in FACTS.readers for s in r.sections}
    rows = []
    for name, section in sections.items():
        measured, p = times[("section", name)], procs[name]
        row = {"section": name, "capability": capability.get(name, "core: the tasks' reads"),
               "purposes": sorted(q for q in PURPOSES if name in names_in[q]),
               "read_by": sorted(section.read_by), "gpu": section.gpu, "rc": outputs[name].rc,
               "wall_ms": measured["wall_ms"] - baseline["wall_ms"], "cpu_ms": measured["cpu_ms"] - baseline["cpu_ms"],
               "output_bytes": len(outputs[name].output)}
        if p is not None:
            row |= {"forks": p["forks"] - baseline_procs["forks"], "execs": p["execs"] - baseline_procs["execs"],
                    "programs": p["programs"], "smi": p["smi"]}
        row["sim_wall_ms"] = sum(smi_times[c]["wall_ms"] for c in row.get("smi", []))
        row["sim_cpu_ms"] = sum(smi_times[c]["cpu_ms"] for c in row.get("smi", []))
        rows.append(row)
    floor_rows = [(label, times[("floor", label)], processes(command, workdir)) for label, command in floor_scripts]
    apply_sections = {name: dataclasses.replace(s, snippet=sandbox.text(s.text()))
                      for name, s in FACTS.sections("apply", states["apply"].reads).items()}
    need = needs(host, tasks["apply"], split_sections(token, run_once(build_script(token, apply_sections))[2]))

    print_report(args, host, inventory, tasks, statuses, left, conn, rows, baseline, baseline_procs, whole, whole_procs,
                 smi_times, python_start, floor_rows, need, len(batches[args.purpose]), (load_before, load_after))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "purpose": args.purpose, "host": host.name, "inventory": inventory, "repeat": args.repeat,
            "rows": rows, "baseline": baseline, "whole": whole, "whole_processes": whole_procs,
            "simulator_calls": smi_times, "python_start": python_start,
            "floors": [{"label": label, **t, "processes": p} for label, t, p in floor_rows], "needs": need,
            "not_converged": left, "task_status": statuses}, indent=2))


def print_report(args, host, inventory, tasks, statuses, left, conn, rows, baseline, baseline_procs, whole, whole_procs,
                 smi_calls, python_start, floor_rows, need, script_bytes, load) -> None:
    out = print
    out(f"# facts batch, purpose {args.purpose}: host {host.name} of {inventory}, playbook {args.playbook}, "
        f"{args.repeat} runs each (medians), {os.cpu_count()} CPUs")
    out("apply's tasks on the sandbox measured: " + "; ".join(f"{n} {s}" for n, s in statuses.items()))
    out("sandbox as first read (--no-converge): nothing applied" if args.no_converge else
        f"sandbox {'converged' if not left else 'NOT converged: ' + '; '.join(left)}; commands the convergence ran: "
        f"{len(conn.ran)}")
    for line in conn.ran:
        if line.startswith(("refused", "  ->", "upkeep")):
            out(f"  {line}")
    out(f"script: {script_bytes} bytes, {len(rows)} sections; load average before/after the timed rounds: "
        f"{' '.join(load[0])} / {' '.join(load[1])}\n")
    has = "forks" in rows[0]
    head = ["section", "capability", "batches (a/f/v)", "wall ms", "CPU ms", "forks", "execs", "sim calls", "sim wall ms", "sim CPU ms",
            "programs exec'd", "fields it sets (here)", "apply tasks reading them", "no-op plan differs without it"]
    out("| " + " | ".join(head) + " |")
    out("|" + "---|" * len(head))
    for r in rows:
        n = need.get(r["section"], {})
        batches = "/".join(p[0] if p in r["purposes"] else "-" for p in PURPOSES)
        out("| " + " | ".join([
            r["section"], r["capability"], batches, f"{r['wall_ms']:.1f}", f"{r['cpu_ms']:.1f}",
            str(r.get("forks", "-")), str(r.get("execs", "-")), str(len(r.get("smi", []))),
            f"{r['sim_wall_ms']:.1f}" if r.get("smi") else "", f"{r['sim_cpu_ms']:.1f}" if r.get("smi") else "",
            " ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(r.get("programs", {}).items())),
            ", ".join(n.get("fields", [])) or "-", ", ".join(n.get("read_by_tasks", [])) or "-",
            ", ".join(n.get("plan_differs", [])) or ("-" if n else "(not in apply's batch)")]) + " |")
    total = {k: sum(r[k] for r in rows) for k in ("wall_ms", "cpu_ms", "sim_wall_ms", "sim_cpu_ms")}
    forks = sum(r.get("forks", 0) for r in rows)
    execs = sum(r.get("execs", 0) for r in rows)
    smi = sum(len(r.get("smi", [])) for r in rows)
    out("| " + " | ".join(["**sum of sections**", "", "", f"{total['wall_ms']:.1f}", f"{total['cpu_ms']:.1f}",
                           str(forks) if has else "-", str(execs) if has else "-", str(smi),
                           f"{total['sim_wall_ms']:.1f}", f"{total['sim_cpu_ms']:.1f}", "", "", "", ""]) + " |")
    out("| " + " | ".join(["sum + one sh start (baseline)", "", "", f"{total['wall_ms'] + baseline['wall_ms']:.1f}",
                           f"{total['cpu_ms'] + baseline['cpu_ms']:.1f}", "", "", "", "", "", "", "", "", ""]) + " |")
    wp = whole_procs or {}
    out("| " + " | ".join(["**whole batch, one sh**", "", "", f"{whole['wall_ms']:.1f}", f"{whole['cpu_ms']:.1f}",
                           str(wp.get("forks", "-")), str(wp.get("execs", "-")), str(len(wp.get("smi", []))),
                           "", "", "", "", "", ""]) + " |")
    out("| " + " | ".join(["**whole batch less the simulator (est.)**", "", "",
                           f"{whole['wall_ms'] - total['sim_wall_ms']:.1f}",
                           f"{whole['cpu_ms'] - total['sim_cpu_ms']:.1f}", "", "", "", "", "", "", "", "", ""]) + " |")
    out(f"\nbaseline (subtracted from each section): sh -c 'exec 2>&1': "
        f"{baseline['wall_ms']:.1f} ms wall, {baseline['cpu_ms']:.1f} ms CPU"
        + (f", {baseline_procs['forks']} forks, {baseline_procs['execs']} execs" if baseline_procs else ""))
    out(f"\nthe GPU simulator's calls alone (Python: NOT real nvidia-smi or dmesg costs); {NODE_PYTHON} -S -c pass: "
        f"{python_start['wall_ms']:.1f} ms wall, {python_start['cpu_ms']:.1f} ms CPU")
    for call, t in smi_calls.items():
        out(f"  {call[:120]}{'...' if len(call) > 120 else ''}: {t['wall_ms']:.1f} ms wall, "
            f"{t['cpu_ms']:.1f} ms CPU")
    out("\nwhat each selected apply task (and the engine's no-op steps) read of the facts while planning (traced):")
    for task, got in need["(task reads)"].items():
        out(f"  {task}: {', '.join(got) or 'nothing'}")
    out("\nfloors, the same way (one sh -c each):")
    for label, t, p in floor_rows:
        out(f"  {label}: {t['wall_ms']:.1f} ms wall, {t['cpu_ms']:.1f} ms CPU"
            + (f", {p['forks']} forks, {p['execs']} execs ({len(p['smi'])} simulator calls)" if p else ""))
    out(f"  whole batch / issue's floor+smi: wall {whole['wall_ms'] / floor_rows[2][1]['wall_ms']:.2f}x, "
        f"CPU {whole['cpu_ms'] / floor_rows[2][1]['cpu_ms']:.2f}x")


if __name__ == "__main__":
    main()

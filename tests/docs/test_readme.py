"""Every command the docs show is run here, as written, where it is meant to run.

The command blocks (indented or fenced shell) of every page (tests/docpages.py: the README, every page
under docs/, benchmarks/README.md, CONTRIBUTING.md) are read from the files themselves, and each command
must be listed in WHERE with the place it runs:

  fresh      a copy of this checkout in an empty directory, as a new user, as one shell session: venv,
             install, activate, demo (`provision` found on PATH only through the activation)
  ci         .ci/run must run it, each part of an `a && b` on a line of its own, sudo dropped (CI runs as
             root): the set-up and the test command (running that here would recurse), lint and types
  dev        a tool of the project's development machines, not installed by the project: run as written
             where it is on PATH (it only reads), skipped elsewhere
  unit       run as written (the pure tests pass alone)
  advise     tests/unit/capabilities/nccl/test_advise.py runs it as written (it reads the inventory, contacts no host) and checks
             its figures and the output pasted under it
  mig        tests/engine/test_adhoc_mig.py runs them as written, in page order, on this machine with two
             simulated H200s, and checks what each makes of the GPUs and the boot file
  simulator  the GPU simulator block, as one shell session in an empty HOME, from an empty directory that it
             must leave empty (it works from anywhere and leaves nothing where it ran)
  sandbox    this machine as root, with a simulated 4x V100 on PATH, in a private mount namespace whose
             /etc, /usr/local, /run and /var are overlays: what the command writes never reaches the host
  geforce    the same on a simulated RTX 4090
  benchmark  as written but at one node, one repeat, without the peers (their venv is not a test's to make)
  active-benchmark  the verify --active benchmark, as written but at two nodes (the fewest with a fabric)
  first-benchmark  the repeated first converges, as written but at one node, one round, without the peers
  offline    run as written in the repository (they read the shipped inventories, contact no host); the
             output a page pastes under them is what they print
  inventory  the inventory loading benchmark, as written but at 200 hosts, one run of each (ansible-inventory
             from the test extra)
  slurm      tests/lab/test_slurm.py runs the block as written, in order (its lab directory in place of the one
             shown)
  slurm-via  tests/lab/test_slurm.py runs them as written, on that lab (its directory in place of the one shown)
  via-slurm-benchmark  the --via slurm benchmark, as written but at two compute nodes, one repeat
  driver     tests/lab/test_driver_install.py runs it as written (its lab directory in place of the one shown)
  pyxis      tests/lab/test_pyxis.py runs them as written, in order (its lab directory in place of the one shown)
  recover    tests/lab/test_recover.py runs them as written, in order (its lab directory in place of the one shown)
  slurm-reboot  tests/lab/test_slurm_reboot.py runs them as written, in order (its lab directory in place of the
             one shown)
  tutorial   the lab rehearsal (lab marker), first on a lab that mirrors inventories/basement.yaml, exactly
             as written: the lab's own inventory and ssh_config, nothing else set up; the default lab
             directory shown is this test's lab directory
  lab        then, on that lab, the basement's own commands: its placeholder addresses reach their lab nodes
             through ~/.ssh/config, so `provision apply inventories/basement.yaml` runs as written
  drill      last, on that lab, in page order: the drills that break or reboot nodes, what verify says
             after them, and `provision lab down`

A command added to any page without a place here fails the first test: an
example nobody runs breaks unnoticed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from docpages import REPO, page_showing, pages

COMMAND_WORDS = ("provision", "python", "python3", ".venv/bin/", "export", "echo", "nvidia-smi", "sudo", ".",
                 "mkdir")
DEFAULT_LAB = "/var/lib/provision-lab/default"
README_MOST_LINES = 300  # the first five minutes of a new user: what it is, set-up, the main commands, the docs

WHERE = {
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]'": "fresh",
    ". .venv/bin/activate": "fresh",
    "provision demo": "fresh",
    "sudo scripts/setup-test-machine.sh && sudo .venv/bin/python -m pytest": "ci",
    ".venv/bin/ruff check && .venv/bin/mypy": "ci",
    ".venv/bin/ruff check": "ci",
    ".venv/bin/mypy": "ci",
    ".venv/bin/lint-imports": "ci",
    "duplicates --change": "dev",
    "python -m pytest": "ci",
    "python -m pytest tests/unit": "unit",
    "provision advise inventories/basement.yaml --limit rtx3090 --params 25M --step-ms 234 --comm-ms 106": "advise",
    "provision apply --local": "sandbox",
    "provision facts --local --json": "sandbox",
    "provision clocks --mem 877 --sm 1005": "sandbox",
    "provision clocks --reset": "sandbox",
    "provision clocks --list": "sandbox",
    "provision persistence on": "sandbox",
    "provision compute-mode exclusive_process": "sandbox",
    "provision ecc off": "sandbox",
    "provision mig 3g.71gb,3g.71gb": "mig",
    "provision mig on": "mig",
    "provision mig off": "mig",
    "provision clocks --locked --sm 210,2520": "geforce",
    "mkdir -p ~/gpusim": "simulator",
    "python3 -m provision_lab.gpusim install ~/bin": "simulator",
    "export PATH=~/bin:$PATH NVIDIA_SIM_CONFIG=~/gpusim/sim.json NVIDIA_SIM_STATE=~/gpusim/state.json "
    "NVIDIA_SIM_KMSG=~/gpusim/kern.log": "simulator",
    """echo '{"gpus": [{"model": "v100-sxm2-16gb", "count": 4}]}' > ~/gpusim/sim.json""": "simulator",
    "nvidia-smi -q -d SUPPORTED_CLOCKS": "simulator",
    "python3 -m provision_lab.gpusim reboot": "simulator",
    "python3 -m provision_lab.gpusim fault 2 off-bus": "simulator",
    "provision lab up --like inventories/basement.yaml": "tutorial",
    f"provision facts {DEFAULT_LAB}/inventory.yaml": "tutorial",
    f"provision apply {DEFAULT_LAB}/inventory.yaml --check": "tutorial",
    f"provision apply {DEFAULT_LAB}/inventory.yaml": "tutorial",
    f"provision verify {DEFAULT_LAB}/inventory.yaml": "tutorial",
    f"provision verify {DEFAULT_LAB}/inventory.yaml --active --duration 10": "tutorial",
    "provision lab status --json": "tutorial",
    "provision apply inventories/basement.yaml": "lab",
    "provision apply inventories/basement.yaml --check": "lab",
    "provision apply inventories/basement.yaml --diff --limit v100": "lab",
    "provision facts inventories/basement.yaml": "lab",
    "provision facts inventories/basement.yaml --limit rtx3090": "lab",
    "provision verify inventories/basement.yaml": "lab",
    "provision unlock inventories/basement.yaml --limit rtx4090-1": "lab",
    "provision power --watts 200 -i inventories/basement.yaml -l v100 --gpu 3": "lab",
    "provision lab fault lab-v100-1 gpu-off-bus --gpu 2": "drill",
    f"provision verify {DEFAULT_LAB}/inventory.yaml --limit lab-v100-1": "drill",
    "provision lab reboot lab-v100-1": "drill",
    "provision lab fault lab-rtx4090-1 gpu-off-bus --gpu 3": "drill",
    "provision lab down": "drill",
    "provision lab up --like tests/lab/slurm.yaml --dir /var/lib/provision-lab/slurm": "slurm",
    "provision apply /var/lib/provision-lab/slurm/inventory.yaml": "slurm",
    "ssh -F /var/lib/provision-lab/slurm/ssh_config lab-gpu-1 "
    "sbatch --wait /usr/local/bin/gpu-torchrun.sbatch /usr/local/bin/provision-allreduce": "slurm",
    "sudo .venv/bin/python benchmarks/apply_scale.py --sizes 1,8,32": "benchmark",
    "sudo .venv/bin/python benchmarks/active_scale.py --sizes 4,32": "active-benchmark",
    "sudo .venv/bin/python benchmarks/first_converge.py --size 32 --rounds 5": "first-benchmark",
    "sudo .venv/bin/python benchmarks/via_slurm_scale.py --sizes 2,8,16": "via-slurm-benchmark",
    "provision apply /var/lib/provision-lab/slurm/inventory.yaml --via slurm": "slurm-via",
    "provision verify /var/lib/provision-lab/slurm/inventory.yaml --via slurm --drain": "slurm-via",
    ".venv/bin/python benchmarks/inventory_load.py": "inventory",
    "provision inventory -i inventories/ansible-style --graph": "offline",
    "provision inventory -i inventories/ansible-style --graph gpu": "offline",
    "provision inventory -i inventories/ansible-style --host gpu04": "offline",
    "provision lab up --like tests/lab/driver.yaml --dir /var/lib/provision-lab/driver": "driver",
    "provision apply /var/lib/provision-lab/driver/inventory.yaml": "driver",
    "provision apply /var/lib/provision-lab/driver/inventory.yaml --reboot --serial 1": "driver",
    "provision lab up --like tests/lab/pyxis.yaml --dir /var/lib/provision-lab/pyxis": "pyxis",
    "provision apply /var/lib/provision-lab/pyxis/inventory.yaml": "pyxis",
    "provision lab up --like tests/lab/slurm_reboot.yaml --dir /var/lib/provision-lab/slurm-reboot": "slurm-reboot",
    "provision apply /var/lib/provision-lab/slurm-reboot/inventory.yaml --reboot --serial 1": "slurm-reboot",
    "provision lab up --like tests/lab/recovery.yaml --dir /var/lib/provision-lab/recovery": "recover",
    "provision apply /var/lib/provision-lab/recovery/inventory.yaml": "recover",
    "provision lab fault lab-recovery-1 gpu-reset-required --gpu 1 --dir /var/lib/provision-lab/recovery": "recover",
    "provision recover /var/lib/provision-lab/recovery/inventory.yaml --check": "recover",
    "provision recover /var/lib/provision-lab/recovery/inventory.yaml": "recover",
    'ssh -F /var/lib/provision-lab/pyxis/ssh_config lab-pyx-gpu-1 "srun --help | grep container-image"': "pyxis",
}


def command_blocks(text: str) -> list[list[str]]:
    """The shell blocks of a Markdown text: lists of commands, comments cut, `\\` continuations joined."""
    blocks, current, fence = [], [], None

    def close() -> None:
        if current:
            blocks.append(list(current))
        current.clear()

    for line in text.splitlines():
        if line.startswith("```"):
            close()
            fence = line[3:].strip() if fence is None else None
        elif fence is not None:
            if fence in ("", "sh", "bash", "shell", "console"):
                current.append(line)
        elif line.startswith("    "):
            current.append(line[4:])
        else:
            close()
    close()
    return [commands for lines in blocks if (commands := _commands(lines))]


def _commands(lines: list[str]) -> list[str]:
    joined = re.sub(r"\\\n\s*", "", "\n".join(lines))
    commands = [re.sub(r"\s+#\s.*$", "", line).strip() for line in joined.splitlines()]
    commands = [c for c in commands if c]
    first = commands[0].split()[0] if commands else ""
    return commands if first in COMMAND_WORDS or first.startswith(".venv/bin/") else []  # not provision_gpu: {}


def shown_commands() -> dict[str, list[str]]:
    """Each command the pages show, with the pages that show it (in page order, a command once)."""
    shown: dict[str, list[str]] = {}
    for page in pages():
        for block in command_blocks(page.read_text()):
            for command in block:
                shown.setdefault(command, []).append(str(page.relative_to(REPO)))
    return shown


def commands_for(where: str) -> list[str]:
    """The pages' commands for one place, in the order a reader meets them (a command shown twice, once)."""
    return [c for c in shown_commands() if WHERE.get(c) == where]


def run(command: str, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# Commands that exit non-zero as their page says: --check before the first apply (bit 8: some host would change);
# verify --active on the lab, whose torch has no CUDA, loads no node, and a node not tested is never a pass (bit
# 64); verify after a drill finds what it broke (bit 1)
EXITS = {f"provision apply {DEFAULT_LAB}/inventory.yaml --check": 8,
         f"provision verify {DEFAULT_LAB}/inventory.yaml --active --duration 10": 64,
         f"provision verify {DEFAULT_LAB}/inventory.yaml --limit lab-v100-1": 1,
         "provision ecc off": 16}  # the reboot that takes the ECC mode is pending


def ok(proc: subprocess.CompletedProcess, command: str) -> str:
    expected = EXITS.get(command, 0)
    assert proc.returncode == expected, \
        f"The docs' command `{command}` exited {proc.returncode}, not {expected}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def needs_root_on_linux():
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("needs root on Linux (mount namespaces, the lab)")


# --- the walk itself ------------------------------------------------------------------------------

def test_every_command_of_every_page_is_run_by_a_test():
    shown = shown_commands()
    assert shown["provision demo"][0] == "README.md" and "docs/tutorial/index.md" in shown["provision demo"]
    unknown = {c: pages for c, pages in shown.items() if c not in WHERE}
    assert not unknown, f"commands no test runs: add each to WHERE with where it runs: {unknown}"
    gone = [c for c in WHERE if c not in shown]
    assert not gone, f"WHERE lists commands no page shows any more: {gone}"


def test_the_readme_is_the_first_five_minutes():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MOST_LINES
    assert "docs/tutorial/index.md" in readme  # and the way on


def test_the_blocks_are_read_like_a_reader_reads_them():
    text = "Prose\n\n    provision a   # note\n    provision b \\\n        --x\n\n    provision_gpu: {}\n\n```sh\necho 1\n```\n"
    assert command_blocks(text) == [["provision a", "provision b --x"], ["echo 1"]]


def test_ci_runs_the_test_commands_the_docs_show():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    for command in commands_for("ci"):
        for part in command.split(" && "):
            part = part.removeprefix("sudo ").removeprefix(".venv/bin/")
            assert any(line.strip().endswith(part) for line in ci), (command, part)


def test_a_fresh_copy_installs_and_runs_the_demo(tmp_path):
    """A new user's first minutes: the files git would give them, an empty venv, the README's set-up as one
    shell session; `provision` is on no PATH but the one the activation sets."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = REPO / name
        if source.is_file() or source.is_symlink():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tmp_path / name, follow_symlinks=False)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(d for d in env["PATH"].split(os.pathsep) if not (Path(d) / "provision").exists())
    session = commands_for("fresh")
    assert session[-1] == "provision demo", session
    out = ok(run("set -e\n" + "\n".join(session), tmp_path, env), "the set-up block")
    assert "ok=8 changed=0 failed=0" in out


def test_the_development_tools_the_docs_name_run_where_installed():
    for command in commands_for("dev"):
        if not shutil.which(command.split()[0]):
            pytest.skip(f"{command.split()[0]} is not on PATH here (a development machine's tool)")
        ok(run(command, REPO), command)


def test_the_unit_tests_pass_on_their_own():
    for command in commands_for("unit"):
        out = ok(run(command.replace("python", sys.executable, 1), REPO), command)
        assert re.search(r"\d+ passed", out)


def test_the_offline_commands_print_what_their_page_shows():
    for command in commands_for("offline"):
        out = ok(run(command.replace("provision", f"{sys.executable} -m provision", 1), REPO), command)
        if "--host gpu04" in command:  # its table is pasted under it, abridged ("...")
            after = page_showing(f"    {command}\n").split(command, 1)[1]
            pasted = after.split("```\n", 1)[1].split("\n```", 1)[0].splitlines()
            assert len(pasted) == 8 and all(line in out.splitlines() for line in pasted if line != "  ..."), out
        else:
            assert "  |  |--gpu01" in out


def test_the_inventory_benchmark_runs_small():
    if not shutil.which("ansible-inventory", path=str(Path(sys.executable).parent)):
        pytest.skip("ansible-inventory not installed (pip install '.[test]' installs it)")
    for command in commands_for("inventory"):
        small = f"{command} --hosts 200 --repeat 1 --ansible-repeat 1".replace(".venv/bin/python", sys.executable)
        out = ok(run(small, REPO), command)
        assert "200 hosts (5 racks)" in out and "| `ansible-inventory --list` | " in out, out


def test_the_simulator_block_runs_as_one_session_anywhere_and_leaves_nothing_there(tmp_path):
    home, anywhere = tmp_path / "home", tmp_path / "anywhere"
    home.mkdir()
    anywhere.mkdir()
    script = "set -e\n" + "\n".join(commands_for("simulator"))
    env = {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}  # the venv active
    out = ok(run(script, anywhere, env), "the simulator block")
    assert out.count("Supported Clocks") == 4 and re.search(r"Memory +: 877 MHz", out)
    assert not list(anywhere.iterdir()), "the simulator block left files where it ran"
    state = json.loads((home / "gpusim" / "state.json").read_text())
    assert [gpu["off_bus"] for gpu in state["gpus"]] == [False, False, True, False]  # what the last line did


# --- this machine, sandboxed ------------------------------------------------------------------------

SANDBOXED = ("/etc", "/usr/local", "/run", "/var")


def sandbox_script(tmp_path: Path, command: str) -> str:
    """`command` in a private mount namespace where SANDBOXED are overlays kept under tmp_path."""
    mounts = []
    for top in SANDBOXED:
        upper, work = tmp_path / "overlay" / top.strip("/") / "upper", tmp_path / "overlay" / top.strip("/") / "work"
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        mounts.append(f"mount -t overlay overlay -o lowerdir={top},upperdir={upper},workdir={work} {top}")
    return " && ".join(mounts) + f" && exec bash -c {json.dumps(command)}"


def simulated_machine(tmp_path: Path, model: str, count: int) -> dict:
    bin_dir = tmp_path / "bin"
    subprocess.run([sys.executable, str(REPO / "provision_lab" / "gpusim"), "install", str(bin_dir)],
                   check=True)
    (bin_dir / "nvidia-persistenced").unlink()  # -pm: a daemon started here would outlive the test
    (tmp_path / "sim.json").write_text(json.dumps({"gpus": [{"model": model, "count": count}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVIDIA_SIM", "PROVISION_"))}
    return env | {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:{env['PATH']}",
                  "NVIDIA_SIM_CONFIG": str(tmp_path / "sim.json"), "NVIDIA_SIM_STATE": str(tmp_path / "state.json"),
                  "NVIDIA_SIM_KMSG": str(tmp_path / "kmsg"), "XDG_STATE_HOME": str(tmp_path / "state")}


@pytest.mark.parametrize("where, model, count", [("sandbox", "v100-sxm2-16gb", 4), ("geforce", "rtx-4090", 1)])
def test_commands_on_this_machine_run_in_a_sandbox(tmp_path, where, model, count):
    needs_root_on_linux()
    env = simulated_machine(tmp_path, model, count)
    outputs = {}
    for command in commands_for(where):
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               sandbox_script(tmp_path, command)], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)
        outputs[command] = ok(proc, command)
    if where == "geforce":
        assert re.search(r"changed +gpu-locked-clocks GPU0: locked GPU clocks \(-lgc\): default -> 210,2520", outputs[
            "provision clocks --locked --sm 210,2520"])
        return
    assert json.loads(outputs["provision facts --local --json"])["localhost"]["nvidia"]["state"] == "ok"
    assert "877,1312 -> 877,1005" in outputs["provision clocks --mem 877 --sm 1005"]
    assert "877,1005 -> 877,1312 (-rac" in outputs["provision clocks --reset"]
    assert "Tesla V100-SXM2-16GB" in outputs["provision clocks --list"]
    assert "Disabled -> Enabled" in outputs["provision persistence on"]
    conf = tmp_path / "overlay" / "etc" / "upper" / "provision" / "gpu-tuning.conf"
    cards = [line for line in conf.read_text().splitlines() if line.startswith("gpu=")]  # not model=... lines
    assert [line.count("persistence=on") for line in cards] == [1] * 4  # the boot file, in the sandbox's /etc
    assert "default -> exclusive_process" in outputs["provision compute-mode exclusive_process"]
    assert [line.count("compute_mode=exclusive_process") for line in cards] == [1] * 4
    assert "Enabled, Disabled at the next reboot or GPU reset" in outputs["provision ecc off"]


# --- the lab -----------------------------------------------------------------------------------------

LAB_UP = "provision lab up --like inventories/basement.yaml"
LAB_DOWN = "provision lab down"


@pytest.fixture(scope="module")
def basement_lab(tmp_path_factory):
    """The pages' lab commands on one lab mirroring inventories/basement.yaml: the tutorial's exactly as
    written, nothing else set up; then the basement's own, its addresses led to the lab; then the drills."""
    needs_root_on_linux()
    lab_dir = Path(os.environ.get("PROVISION_README_LAB_DIR", "/var/lib/provision-lab/readme"))
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVIDIA_SIM", "PROVISION_"))}
    env |= {"PROVISION_LAB_DIR": str(lab_dir), "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
            "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}
    subprocess.run([sys.executable, "-m", "provision", "lab", "down"], env=env, capture_output=True)
    tutorial, drills = commands_for("tutorial"), commands_for("drill")
    assert tutorial[0] == LAB_UP and LAB_DOWN in drills, "the lab pages start and end no lab"
    outputs = {}
    try:
        for command in tutorial:
            outputs[command] = ok(run(command.replace(DEFAULT_LAB, str(lab_dir)), REPO, env), command)
        basement_reaches_the_lab(home, lab_dir, env)  # before any basement command can dial its addresses
        for command in commands_for("lab") + [c for c in drills if c != LAB_DOWN]:  # down: last, below
            outputs[command] = ok(run(command.replace(DEFAULT_LAB, str(lab_dir)), REPO, env), command)
    finally:
        outputs[LAB_DOWN] = ok(run(LAB_DOWN, REPO, env), LAB_DOWN)
    return outputs


def basement_reaches_the_lab(home: Path, lab_dir: Path, env: dict) -> None:
    """~/.ssh/config: each basement host's address leads to its lab node (the lab's key and known_hosts)."""
    from provision.inventory.load import load_inventory

    status = json.loads(ok(run("provision lab status --json", REPO, env), "lab status"))
    lab_address = {n["name"]: n["address"] for n in status["nodes"]}
    lines = []
    for host in load_inventory(REPO / "inventories" / "basement.yaml").hosts.values():
        lines += [f"Host {host.address}", f"  HostName {lab_address['lab-' + host.name]}", "  User root",
                  f"  IdentityFile {lab_dir / 'id_ed25519'}", f"  UserKnownHostsFile {lab_dir / 'known_hosts'}"]
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (home / ".ssh" / "config").write_text("\n".join(lines) + "\n")


@pytest.mark.lab
def test_the_tutorial_rehearses_on_the_lab_as_written(basement_lab):
    lab_inventory = f"{DEFAULT_LAB}/inventory.yaml"
    assert "Try:        provision facts " in basement_lab[LAB_UP]  # what the tutorial shows `up` printing
    assert basement_lab[f"provision facts {lab_inventory}"].count("Tesla V100-SXM2-16GB") == 4
    assert re.search(r"would change=[1-9]", basement_lab[f"provision apply {lab_inventory} --check"])
    assert re.search(r"^lab-v100-1 +ok=\d+ changed=[1-9]", basement_lab[f"provision apply {lab_inventory}"], re.M)
    assert "\n6 hosts: 6 pass" in basement_lab[f"provision verify {lab_inventory}"]
    # the lab's torch is the CPU build: no GPU load runs, so no node is tested under load, never a pass (the
    # V100 brownout under a load: tests/lab/test_active_load.py); the blades' ports and their gloo all-reduce
    # through the wrapper run and pass
    active = basement_lab[f"provision verify {lab_inventory} --active --duration 10"]
    assert "\n6 hosts: 6 not tested" in active and "sees no CUDA GPU" in active and " FAIL " not in active, active
    # the drill: GPU 2 off the bus is one finding, on that node
    assert "no_gpu_is_lost" in basement_lab[f"provision verify {lab_inventory} --limit lab-v100-1"]


@pytest.mark.lab
def test_the_lab_commands_run_as_written(basement_lab):
    assert "\n6 hosts: " in basement_lab["provision apply inventories/basement.yaml"]
    assert "would change=0" in basement_lab["provision apply inventories/basement.yaml --check"]
    # every run gave its locks back: nothing to remove
    assert re.fullmatch(r"rtx4090-1 +no lock\n",
                        click.unstyle(basement_lab["provision unlock inventories/basement.yaml --limit rtx4090-1"]))
    nodes = json.loads(basement_lab["provision lab status --json"])["nodes"]
    assert len(nodes) == 6


@pytest.mark.lab
def test_the_basement_commands_converge_the_mirror(basement_lab):
    # the tutorial converged these nodes already, as lab-*: the basement's names run through them again
    assert re.search(r"^v100-1 +ok=\d+ changed=\d+ failed=0", basement_lab["provision apply inventories/basement.yaml"],
                     re.M)
    facts = basement_lab["provision facts inventories/basement.yaml"]
    assert facts.count("Tesla V100-SXM2-16GB") == 4 and "877,1005" in facts
    blades = basement_lab["provision facts inventories/basement.yaml --limit rtx3090"]
    assert blades.count("nccl: NCCL_SOCKET_IFNAME=ens803f: uses ens803f0 (10000 Mb/s), ens803f1 (10000 Mb/s)") == 4
    shown = [line for line in pasted_under("provision facts inventories/basement.yaml --limit rtx3090").splitlines()
             if line != "  ..."]  # the page abridges the host's lines between
    printed = iter(blades.splitlines())
    assert all(line in printed for line in shown), (shown, blades)  # in the order printed
    assert "\n6 hosts: 6 pass" in basement_lab["provision verify inventories/basement.yaml"]
    # 200 W is what the inventory says already: a no-op, one line for the host
    assert re.search(r"^v100-1 +ok=\d+ changed=0 failed=0",
                     basement_lab["provision power --watts 200 -i inventories/basement.yaml -l v100 --gpu 3"], re.M)


def pasted_under(command: str) -> str:
    """The output its page shows in the ```text block under `command`."""
    after = page_showing(f"    {command}\n").split(f"    {command}\n", 1)[1]
    return after.split("```text\n", 1)[1].split("```", 1)[0]


def run_small(command: str, sizes: str, lab: str) -> str:
    """A benchmark as written, with its --sizes replaced (and what follows them), in its own lab."""
    small = re.sub(r"--sizes [0-9,]+", f"--sizes {sizes}", command.removeprefix("sudo "))
    return ok(run(f"{small} --dir {lab}".replace(".venv/bin/python", sys.executable), REPO), command)


@pytest.mark.lab
def test_the_active_benchmark_runs_at_two_nodes():
    needs_root_on_linux()
    for command in commands_for("active-benchmark"):
        out = run_small(command, "2", "/var/lib/provision-lab/readme-bench-active")
        [row] = [line for line in out.splitlines() if line.startswith("2 | ")]
        assert row.endswith("| 2/2"), row  # both nodes loaded, their ports and all-reduce measured, passed


@pytest.mark.lab
def test_the_first_converge_benchmark_runs_at_one_node():
    needs_root_on_linux()
    for command in commands_for("first-benchmark"):
        small = command.removeprefix("sudo ").replace("--size 32 --rounds 5", "--size 1 --rounds 1 --no-peers")
        out = ok(run(f"{small} --dir /var/lib/provision-lab/readme-bench-first".replace(".venv/bin/python",
                                                                                      sys.executable), REPO), command)
        [row] = [line.split(" | ") for line in out.splitlines() if line.startswith("| 1 | ")]
        assert row[1] == "1" and re.fullmatch(r"\d+\.\d\d \(\d+\.\d\d-\d+\.\d\d\)", row[2]), row  # a first converge, timed
        assert row[3] == "-" and row[4] == "-", row  # no peers asked for


@pytest.mark.lab
def test_the_via_slurm_benchmark_runs_at_two_compute_nodes():
    needs_root_on_linux()
    for command in commands_for("via-slurm-benchmark"):
        out = run_small(command, "2 --repeat 1", "/var/lib/provision-lab/readme-bench-via-slurm")
        rows = [line.split(" | ") for line in out.splitlines() if line.startswith("2 | ")]
        assert [r[1] for r in rows] == ["no-op apply", "no-op apply --limit gpu (the compute nodes)",
                                        "apply, nccl.conf restored on every node", "verify"], out
        for row in rows:  # each way measured: a wall time and the control process's CPU
            assert all(re.fullmatch(r"\d+\.\d\d s / \d+\.\d\d s", cell) for cell in row[2:]), row


@pytest.mark.lab
def test_the_benchmark_runs_at_one_node():
    needs_root_on_linux()
    for command in commands_for("benchmark"):
        out = run_small(command, "1 --repeat 1 --no-peers", "/var/lib/provision-lab/readme-bench")
        row, verified = [line.split(" | ") for line in out.splitlines() if line.startswith("1 | ")]  # two tables
        head = out.splitlines()[0].split(" | ")
        assert out.split("\n\n")[1].startswith("nodes | verify s | floor s | verify/floor"), out
        assert float(verified[1]) > 0 and verified[3].endswith("x"), verified  # verify, timed against the floor
        commands = row[head.index("cmds/host first") + 1:head.index("cmds/host first") + 3]
        assert commands == ["1", "1"], row  # a no-op and --check: one command per host
        assert float(row[head.index("no-op/floor+smi CPU")].rstrip("x")) > 0, row  # the control CPU, measured

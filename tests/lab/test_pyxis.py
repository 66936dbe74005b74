"""enroot and pyxis end to end on a lab Slurm cluster (tests/lab/pyxis.yaml: a controller and one GPU node), with
the lab's real Debian Slurm and a real SPANK plugin compiled against its spank.h (provision_lab/stack_pyxis.py).
Slurm alone: srun knows no --container-image. With provision_slurm.containers: enroot and pyxis pinned and held,
pyxis in the plugin stack, slurmd restarted and holding the plugin, srun listing pyxis's options and a job with
--container-image answering as pyxis does; a second apply changes nothing and restarts no slurmd. Each cause is one
finding whose next step, run as written, fixes it: enroot at another version, a slurmd that started without the
plugin."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from builders import stacklab

pytestmark = pytest.mark.lab

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "slurm-torchrun.md"
HEAD, NODE = "lab-pyx-head", "lab-pyx-gpu-1"
# The Slurm how-to's pyxis block (tests/docs/test_readme.py: place "pyxis"), run as written in this test's lab
# directory.
SHOWN_DIR = "/var/lib/provision-lab/pyxis"
SHOWN_UP = f"provision lab up --like tests/lab/pyxis.yaml --dir {SHOWN_DIR}"
SHOWN_APPLY = f"provision apply {SHOWN_DIR}/inventory.yaml"
SHOWN_HELP = f'ssh -F {SHOWN_DIR}/ssh_config {NODE} "srun --help | grep container-image"'
CHECKS = ("enroot_and_pyxis_are_the_pinned_versions", "pyxis_is_in_the_plugin_stack", "slurmd_has_loaded_pyxis")
PINNED = {"enroot": "3.5.0-1provision1", "enroot+caps": "3.5.0-1provision1",
          "nvslurm-plugin-pyxis": "0.20.0-1provision1"}
OPTION = "--container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH"


def as_written(command: str, lab) -> subprocess.CompletedProcess:
    return stacklab.as_written(command, lab, SHOWN_DIR, PAGE)


@pytest.fixture(scope="module")
def pyxis_lab(lab_alone):
    def up(cluster):
        made = as_written(SHOWN_UP, cluster)
        assert made.returncode == 0, made.stdout + made.stderr

    with lab_alone("pyxis", up) as cluster:
        yield cluster


def on(lab, node: str, command: str) -> str:
    return stacklab.on(lab, node, command)


def applied(lab, inventory: Path | None = None, *args: str) -> dict:
    code, result = lab.apply(*args, inventory=inventory)
    assert code == 0, json.dumps(result)[:3000]
    return result


def ours(lab) -> dict[str, dict]:
    """Per host: our checks' findings and those passed."""
    _, judged = stacklab.verdicts(lab)
    return {host: {"findings": stacklab.findings(v, *CHECKS), "passed": [c for c in v["passed"] if c in CHECKS]}
            for host, v in judged.items()}


def slurmd_pid(lab) -> str:
    return on(lab, NODE, "cat /run/slurmd.pid").strip()


def idle(lab) -> bool:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if re.search(rf"^{NODE} idle", on(lab, HEAD, "sinfo -h -N -o '%N %t'"), re.M):
            return True
        time.sleep(1)
    return False


def test_srun_has_pyxis_options_after_apply_and_not_before(pyxis_lab, tmp_path):
    tree = yaml.safe_load(pyxis_lab.inventory.read_text())
    del tree["all"]["vars"]["provision_slurm"]["containers"]
    (slurm_only := tmp_path / "slurm-only.yaml").write_text(yaml.safe_dump(tree))
    applied(pyxis_lab, slurm_only)
    before = as_written(SHOWN_HELP, pyxis_lab)
    assert before.returncode == 1 and before.stdout == "", before.stdout + before.stderr  # grep found nothing

    pid = slurmd_pid(pyxis_lab)
    shown = as_written(SHOWN_APPLY, pyxis_lab)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert slurmd_pid(pyxis_lab) != pid  # restarted for the plugin stack
    after = as_written(SHOWN_HELP, pyxis_lab)
    assert after.returncode == 0 and after.stdout.split()[0] == OPTION, after.stdout + after.stderr
    for host in (HEAD, NODE):  # srun loads pyxis too: on every node
        installed = on(pyxis_lab, host, "dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(PINNED))
        assert dict(line.split() for line in installed.splitlines()) == PINNED
        assert set(PINNED) <= set(on(pyxis_lab, host, "apt-mark showhold").split())
        assert OPTION in on(pyxis_lab, host, "srun --help")
    assert "spank_pyxis.so" in on(pyxis_lab, NODE, f"cat /proc/{slurmd_pid(pyxis_lab)}/maps"), on(
        pyxis_lab, NODE, "tail -30 /var/log/slurm/slurmd.log; ls -l --time-style=+%s /etc/slurm/plugstack.conf.d; "
                         "ps -o pid,lstart,args -C slurmd")
    assert "ENROOT_DATA_PATH /var/lib/enroot/data/user-$(id -u)" in on(
        pyxis_lab, NODE, "cat /etc/enroot/enroot.conf.d/provision.conf")
    assert on(pyxis_lab, NODE, "stat -c %a /var/lib/enroot/data /run/enroot").split() == ["1777", "1777"]
    judged = ours(pyxis_lab)
    assert judged[NODE] == {"findings": [], "passed": list(CHECKS)}, judged
    assert judged[HEAD]["findings"] == [], judged  # no slurmd there: two checks

    assert idle(pyxis_lab), on(pyxis_lab, HEAD, "sinfo -N")
    job = pyxis_lab.ssh(NODE, f"srun -N1 -w {NODE} --container-image=ubuntu:24.04 printenv PYXIS_LAB_IMAGE")
    assert job.returncode == 0 and job.stdout.strip() == "ubuntu:24.04", job.stdout + job.stderr
    assert "pyxis: importing docker image: ubuntu:24.04" in job.stderr


def test_a_second_apply_changes_nothing_and_restarts_no_slurmd(pyxis_lab):
    pid = slurmd_pid(pyxis_lab)
    result = applied(pyxis_lab)
    assert [(h["host"], t["name"]) for h in result["hosts"] for t in h["tasks"] if t["status"] == "changed"] == []
    assert slurmd_pid(pyxis_lab) == pid


def test_enroot_at_another_version_is_one_finding_and_apply_as_it_says_fixes_it(pyxis_lab):
    on(pyxis_lab, NODE, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
                        "--allow-change-held-packages enroot=3.4.1-1provision1 enroot+caps=3.4.1-1provision1")
    (finding,) = ours(pyxis_lab)[NODE]["findings"]
    assert finding["check"] == CHECKS[0] and "enroot 3.4.1-1provision1" in finding["found"], finding
    assert finding["next_step"] == f"provision apply {pyxis_lab.inventory} --limit {NODE}"
    applied(pyxis_lab, None, "--limit", NODE)
    assert ours(pyxis_lab)[NODE] == {"findings": [], "passed": list(CHECKS)}


def test_a_slurmd_started_without_the_plugin_is_one_finding_and_its_restart_fixes_it(pyxis_lab):
    drop_in = "/etc/slurm/plugstack.conf.d/pyxis.conf"
    on(pyxis_lab, NODE, f"mv {drop_in} /root/pyxis.conf && service slurmd restart && sleep 1 && "
                        f"mv /root/pyxis.conf {drop_in}")  # mv keeps its mtime: older than this slurmd
    (finding,) = ours(pyxis_lab)[NODE]["findings"]
    assert finding["check"] == CHECKS[2] and "has not loaded it" in finding["found"], finding
    named = re.match(rf"on {NODE}: (sudo service slurmd restart) ", finding["next_step"])
    assert named, finding["next_step"]
    on(pyxis_lab, NODE, named[1].removeprefix("sudo "))  # the lab logs in as root
    deadline = time.monotonic() + 30
    while ours(pyxis_lab)[NODE]["findings"] and time.monotonic() < deadline:
        time.sleep(1)
    assert ours(pyxis_lab)[NODE] == {"findings": [], "passed": list(CHECKS)}

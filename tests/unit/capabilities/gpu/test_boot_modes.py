"""The boot file and its script for the modes: compute mode is set again at every boot, ECC mode is not (the
driver keeps it)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

from builders.facts import facts
from builders.gpus import gpus
from builders.hosts import host
from paths import TEMPLATES

from provision.capabilities.gpu import boot
from provision.capabilities.gpu.adhoc import settings_from_boot_file

BOOT_SCRIPT = TEMPLATES / "provision-gpu-tuning.sh"
SETTINGS = {"persistence": True, "ecc": True, "compute_mode": "exclusive_process",
            "overrides": [{"index": 1, "compute_mode": "default"}]}


def h100s():
    return gpus(2, "H100", ecc_enabled=True, ecc_pending=True, compute_mode="default", mig_mode=False)


def lines(text: str) -> list[str]:
    return [line.partition("  #")[0] for line in text.splitlines() if not line.startswith("#")]


def test_every_line_sets_the_compute_mode_and_none_the_ecc_mode():
    text = boot.render(host(provision_gpu=SETTINGS), facts(gpus=h100s()))
    assert lines(text) == [
        "gpu=GPU-2330-0000 index=0 persistence=on compute_mode=exclusive_process",
        "gpu=GPU-2330-0001 index=1 persistence=on compute_mode=default",
        "model=NVIDIA_H100_80GB_HBM3 persistence=on compute_mode=exclusive_process",
        "model=* persistence=on compute_mode=exclusive_process"]
    assert "ecc" not in text.replace("# ", "")  # the driver keeps ECC mode across reboots


def test_a_mig_enabled_gpu_gets_no_compute_mode_it_would_refuse():
    cards = [replace(h100s()[0], mig_mode=True)]
    text = boot.render(host(provision_gpu={"compute_mode": "prohibited"}), facts(gpus=cards))
    assert lines(text)[0] == "gpu=GPU-2330-0000 index=0"


def test_the_boot_file_read_back_keeps_its_compute_modes():
    """The ad-hoc commands start from the boot file: read back, it renders itself."""
    text = boot.render(host(provision_gpu=SETTINGS), facts(gpus=h100s()))
    back = settings_from_boot_file(text)
    assert boot.render(host(provision_gpu=back.model_dump(exclude_defaults=True)), facts(gpus=h100s()), text) == text


def test_the_boot_file_read_back_keeps_a_mig_layout():
    """An ad-hoc command (provision clocks, say) writes the boot file again from it: the MIG layout stays in it,
    so the next boot still makes the instances."""
    mig_gpus = gpus(2, "H100", ecc_enabled=True, ecc_pending=True, compute_mode="default", mig_mode=True)
    settings = {"persistence": True, "overrides": [{"index": 0, "mig": ["3g.40gb", "3g.40gb"]}]}
    text = boot.render(host(provision_gpu=settings), facts(gpus=mig_gpus))
    assert "mig=3g.40gb,3g.40gb" in text
    back = settings_from_boot_file(text)
    assert [o.mig for o in back.overrides if o.mig] == [["3g.40gb", "3g.40gb"]]
    assert boot.render(host(provision_gpu=back.model_dump(exclude_defaults=True)), facts(gpus=mig_gpus), text) == text


def test_the_boot_script_sets_the_compute_mode_after_persistence(tmp_path):
    conf = tmp_path / "gpu-tuning.conf"
    conf.write_text(boot.render(host(provision_gpu=SETTINGS), facts(gpus=h100s())))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\necho "$*" >> "$CALLS"\n'
                                        'case "$*" in --query-gpu*) echo "GPU-2330-0000, NVIDIA H100 80GB HBM3";; esac\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
           "PROVISION_CLOCK_RECORDS": str(tmp_path / "records")}
    done = subprocess.run(["sh", str(BOOT_SCRIPT), str(conf)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "calls").read_text().splitlines()[:4] == [
        "-i GPU-2330-0000 -pm 1", "-i GPU-2330-0000 -c EXCLUSIVE_PROCESS",
        "-i GPU-2330-0001 -pm 1", "-i GPU-2330-0001 -c DEFAULT"]


MODE_QUERY = "-i GPU-2330-0000 --query-gpu=mig.mode.current --format=csv,noheader"


def boot_calls(tmp_path, conf_text: str, answers: str = "") -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """The boot script run on conf_text with an nvidia-smi that logs its calls and answers with the shell case
    arms `answers` (after the query of the GPUs, which it answers with none)."""
    conf = tmp_path / "gpu-tuning.conf"
    conf.write_text(conf_text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f'#!/bin/sh\necho "$*" >> "$CALLS"\ncase "$*" in {answers} *) ;; esac\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
           "PROVISION_CLOCK_RECORDS": str(tmp_path / "records")}
    done = subprocess.run(["sh", str(BOOT_SCRIPT), str(conf)], env=env, capture_output=True, text=True, timeout=30)
    return (tmp_path / "calls").read_text().splitlines(), done


def test_a_line_word_of_another_part_follows_the_settings_and_the_script_makes_the_mig_layout(tmp_path, monkeypatch):
    """The seam MIG's layout takes (boot.LINE_WORDS): its words end the GPU's line; at boot, mig_layout makes the
    layout after the GPU's other settings, where the GPU has no GPU instance yet."""
    monkeypatch.setattr(boot, "LINE_WORDS", (lambda gpu, facts, want: ["mig=9:0,9:4"] if gpu.index == 0 else [],))
    text = boot.render(host(provision_gpu={"persistence": True}), facts(gpus=h100s()))
    assert lines(text)[:2] == ["gpu=GPU-2330-0000 index=0 persistence=on mig=9:0,9:4",
                               "gpu=GPU-2330-0001 index=1 persistence=on"]
    calls, done = boot_calls(tmp_path, text)
    assert done.returncode == 0, done.stderr
    assert calls[:5] == ["-i GPU-2330-0000 -pm 1", "mig -i GPU-2330-0000 -lgi", MODE_QUERY,
                         "mig -i GPU-2330-0000 -cgi 9:0,9:4 -C", "-i GPU-2330-0001 -pm 1"]


def test_a_mig_layout_that_cannot_be_made_is_destroyed_and_the_boot_fails(tmp_path):
    calls, done = boot_calls(tmp_path, "gpu=GPU-2330-0000 mig=9:0,9:0\n",
                             "*-cgi*) echo 'Unable to create a GPU instance on GPU  0 using profile 9: "
                             "Insufficient Resources'; exit 2;;")
    assert calls[:5] == ["mig -i GPU-2330-0000 -lgi", MODE_QUERY, "mig -i GPU-2330-0000 -cgi 9:0,9:0 -C",
                         "mig -i GPU-2330-0000 -dci", "mig -i GPU-2330-0000 -dgi"]
    assert done.returncode == 1 and "MIG layout 9:0,9:0 of GPU-2330-0000 not made" in done.stderr


def test_a_gpu_that_has_its_instances_is_left_alone(tmp_path):
    """-lgi lists its instances (a row of its table, in the shape published outputs show): the unit run again by
    hand."""
    calls, done = boot_calls(tmp_path, "gpu=GPU-2330-0000 mig=9:0,9:4\n",
                             "*-lgi*) echo '|   0  MIG 3g.71gb          9        2          0:4     |';;")
    assert done.returncode == 0 and calls[:1] == ["mig -i GPU-2330-0000 -lgi"]
    assert not any("-cgi" in call for call in calls) and "present: left alone" in done.stdout


def test_a_mig_mode_the_driver_lost_is_turned_on_before_the_layout(tmp_path):
    """Hopper and later keep no MIG mode across a driver reload (NVIDIA's MIG user guide)."""
    calls, done = boot_calls(tmp_path, "gpu=GPU-2330-0000 mig=9:0,9:4\n", "*mig.mode.current*) echo Disabled;;")
    assert done.returncode == 0, done.stderr
    assert calls[:4] == ["mig -i GPU-2330-0000 -lgi", MODE_QUERY, "-i GPU-2330-0000 -mig 1",
                         "mig -i GPU-2330-0000 -cgi 9:0,9:4 -C"]

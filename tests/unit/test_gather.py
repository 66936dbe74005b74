"""The one-command facts batch: built, run by a real sh, split back and parsed."""

from __future__ import annotations

import subprocess

from provision.facts import gather


def run_batch(tmp_path, paths=(), lock_owner=None, env_path="/usr/bin:/bin"):
    token = gather.new_token()
    script = gather.build_script(token, list(paths), lock_owner=lock_owner)
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env={"PATH": env_path}).stdout
    return gather.split_sections(token, out)


def test_batch_reports_system_facts_and_a_missing_driver(tmp_path):
    sections = run_batch(tmp_path)
    facts = gather.parse_facts(sections)
    assert facts.system.uid is not None and facts.system.hostname
    assert facts.nvidia.state == "missing" and facts.nvidia.gpus == []


def test_file_sections_survive_awkward_paths_and_content(tmp_path):
    awkward = tmp_path / "it's a \"file\" $(touch pwned); x"
    awkward.write_bytes(b"line one\n@@not-a-marker\nno newline at end")
    missing = tmp_path / "absent.conf"
    facts = gather.parse_facts(run_batch(tmp_path, [str(awkward), str(missing)]))
    got = facts.files[str(awkward)]
    assert got.exists and got.content == b"line one\n@@not-a-marker\nno newline at end"
    assert got.mode and got.owner
    assert facts.files[str(missing)].exists is False
    assert not (tmp_path / "pwned").exists() and not (tmp_path.parent / "pwned").exists()


def test_sections_keep_output_without_trailing_newline():
    token = "t0k"
    out = "@@t0k a\nfirst\nlast-no-newline\n@@t0k a rc=3\n@@t0k b\n\n@@t0k b rc=0\n"
    sections = gather.split_sections(token, out)
    assert sections["a"] == gather.Section(3, "first\nlast-no-newline")
    assert sections["b"] == gather.Section(0, "")


def test_no_devices_and_driver_errors_are_states(tmp_path):
    def facts_with(query_output: str, rc: int):
        return gather.parse_facts({
            "nvidia-smi": gather.Section(0, "/usr/bin/nvidia-smi"),
            "query-gpu": gather.Section(rc, query_output),
        }).nvidia
    assert facts_with("No devices were found", 6).state == "no-devices"
    failed = facts_with("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9)
    assert failed.state == "error" and "couldn't communicate" in failed.message
    assert facts_with("garbage, row", 0).state == "error"


def test_lock_is_taken_once_and_reports_its_holder(tmp_path, monkeypatch):
    from provision import remote
    monkeypatch.setattr(remote, "LOCK_DIR", str(tmp_path / "lock"))
    first = run_batch(tmp_path, lock_owner="run A")
    second = run_batch(tmp_path, lock_owner="run B")
    assert first["lock"].rc == 0
    assert second["lock"].rc == 1 and "run A" in second["lock"].output
    subprocess.run(remote.lock_release_argv("run B"), check=False)
    assert (tmp_path / "lock").exists()  # not B's to release
    subprocess.run(remote.lock_release_argv("run A"), check=True)
    assert not (tmp_path / "lock").exists()


def test_a_reread_after_file_changes_skips_the_nvidia_sections():
    full = gather.build_script("tok", ["/etc/x"])
    files_only = gather.build_script("tok", ["/etc/x"], nvidia=False)
    assert "nvidia-smi" in full and "nvidia-smi" not in files_only and "@@tok file:/etc/x" in files_only

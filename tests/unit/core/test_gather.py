"""The one-command facts batch: built, run by a real sh, split back and parsed."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from provision.capabilities.health import facts as health_facts
from provision.capabilities.registry import FACTS
from provision.core.facts import Reads
from provision.core import facts as gather


def run_batch(tmp_path, paths=(), lock=None, env_path="/usr/bin:/bin"):
    token = gather.new_token()
    script = FACTS.script(token, reads=Reads(tuple(paths)), before={"lock": lock} if lock else None)
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env={"PATH": env_path}).stdout
    return gather.split_sections(token, out)


def test_batch_reports_system_facts_and_a_missing_driver(tmp_path):
    sections = run_batch(tmp_path)
    facts = FACTS.parse(sections)
    assert facts.system.uid is not None and facts.system.hostname
    assert facts.nvidia.state == "missing" and facts.nvidia.gpus == []


def test_file_sections_survive_awkward_paths_and_content(tmp_path):
    awkward = tmp_path / "it's a \"file\" $(touch pwned); x"
    awkward.write_bytes(b"line one\n@@not-a-marker\nno newline at end")
    missing = tmp_path / "absent.conf"
    facts = FACTS.parse(run_batch(tmp_path, [str(awkward), str(missing)]))
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
        return FACTS.parse({
            "nvidia-smi": gather.Section(0, "/usr/bin/nvidia-smi"),
            "query-gpu": gather.Section(rc, query_output),
        }).nvidia
    assert facts_with("No devices were found", 6).state == "no-devices"
    failed = facts_with("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9)
    assert failed.state == "error" and "couldn't communicate" in failed.message
    assert facts_with("garbage, row", 0).state == "error"


def test_the_lock_is_the_first_section_and_its_holder_is_reported(tmp_path):
    from provision.core import hostlock
    lock_dir = str(tmp_path / "lock")
    a, b = hostlock.Owner("run A", "aaaa"), hostlock.Owner("run B", "bbbb")
    first = run_batch(tmp_path, lock=hostlock.take_argv(a, lock_dir=lock_dir))
    second = run_batch(tmp_path, lock=hostlock.take_argv(b, lock_dir=lock_dir))
    assert first["lock"].rc == 0 and first["lock"].output == "taken"
    assert second["lock"].rc == 1 and hostlock.Owner.parse(hostlock.take_message(second["lock"].output)[1]).said == "run A"


def test_a_reread_after_file_changes_skips_the_nvidia_sections():
    full = FACTS.script("tok", reads=Reads(("/etc/x",)))
    files_only = FACTS.script("tok", reads=Reads(("/etc/x",)), altered=frozenset({"units.enabled"}))
    assert "nvidia-smi" in full and "nvidia-smi" not in files_only
    assert "@@tok files" in files_only and "/etc/x" in files_only


def fake_bin(tmp_path, **programs: str):
    """A PATH of the given sh programs (name -> script body) before the system's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in programs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def kernel_log(tmp_path, **programs: str):
    token = gather.new_token()
    script = FACTS.script(token, "verify")
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                         env={"PATH": fake_bin(tmp_path, **programs)}).stdout
    return FACTS.parse(gather.split_sections(token, out)).kernel_log


XID_79 = "[   65.315783] NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_the_kernel_log_keeps_the_nvidia_and_aer_lines_and_says_where_it_came_from(tmp_path):
    log = kernel_log(tmp_path, dmesg=f"echo '[    0.000000] Linux version 6.1'; echo \"{XID_79}\"; "
                                     "echo '[   70.1] pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0'")
    assert log.source == "dmesg" and log.lines == [XID_79, "[   70.1] pcieport 0000:00:01.0: AER: Corrected error "
                                                            "received: 0000:01:00.0"]


def test_a_restricted_dmesg_falls_back_to_sudo_then_to_the_journal(tmp_path):
    refused = "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1"
    user = "echo 1000"  # id -u of a user who is not root
    log = kernel_log(tmp_path, id=user, dmesg=refused, sudo=f"[ \"$*\" = '-n dmesg' ] && echo \"{XID_79}\"")
    assert log.source == "sudo dmesg" and log.lines == [XID_79]
    journal = "Mar 21 20:18:56 pc kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."
    log = kernel_log(tmp_path, id=user, dmesg=refused, sudo="exit 1", journalctl=f"echo '{journal}'")
    assert log.source == "journalctl -k -b" and log.lines == [journal]
    as_root = kernel_log(tmp_path, id="echo 0", dmesg=refused, sudo="echo never asked", journalctl=f"echo '{journal}'")
    assert as_root.source == "journalctl -k -b"
    nothing = kernel_log(tmp_path, id=user, dmesg=refused, sudo="exit 1", journalctl="exit 0")
    assert nothing.source is None and nothing.message == "dmesg: read kernel buffer failed: Operation not permitted"


def test_aer_counters_of_each_gpu_and_its_port_are_read_by_name():
    text = ("== 0000:01:00.0 0000:00:01.0 port\n== 0000:02:00.0 0000:00:02.0 port\n"
            "== 0000:01:00.0 0000:01:00.0 aer_dev_correctable\nRxErr 3\nBadTLP 1\nBadDLLP 0\nTOTAL_ERR_COR 4\n"
            "== 0000:01:00.0 0000:00:01.0 aer_dev_correctable\nReceiver Error 2\nBad TLP 0\nTOTAL_ERR_COR 2\n"
            "== 0000:01:00.0 0000:01:00.0 aer_dev_fatal\nUndefined 0\nTOTAL_ERR_FATAL 0\n")
    pcie = health_facts.parse_pcie_aer(text)
    assert pcie.ports == {"0000:01:00.0": "0000:00:01.0", "0000:02:00.0": "0000:00:02.0"}
    gpu, port, fatal = pcie.aer
    assert (gpu.device, gpu.kind, gpu.counts, gpu.total) == ("0000:01:00.0", "correctable",
                                                             {"RxErr": 3, "BadTLP": 1, "BadDLLP": 0}, 4)
    assert (port.gpu, port.device, port.counts["Receiver Error"], port.total) == ("0000:01:00.0", "0000:00:01.0", 2, 2)
    assert (fatal.kind, fatal.total) == ("fatal", 0)


def test_health_sections_are_read_only_when_asked():
    assert "dmesg" not in FACTS.script("tok") and "@@tok kernel-log" in FACTS.script("tok", "verify")


def test_each_command_reads_its_own_sections_and_a_section_name_is_one_capabilitys():
    from provision.core.facts import FactReader, FactRegistry, FactSection
    apply, facts, verify = (FACTS.sections(purpose) for purpose in ("apply", "facts", "verify"))
    assert {"query-gpu", "net", "driver", "gpu-layout"} <= set(apply) and "topo" not in apply
    assert "topo" in facts and "kernel-log" not in facts
    assert {"topo", "kernel-log", "pcie-aer", "slurm-node"} <= set(verify)
    assert not [name for name, section in FACTS.sections("apply", altered=frozenset()).items() if section.refresh_on]
    twin = FactReader((FactSection("net", "true"),), lambda sections, facts: None)
    with pytest.raises(ValueError, match="net"):
        FactRegistry(object, [*FACTS.readers[1:], twin])


def test_a_new_section_is_one_reader_in_the_registry_and_its_parser_sets_its_field():
    from types import SimpleNamespace
    from provision.core.facts import FactReader, FactRegistry, FactSection

    def parse(sections, facts):
        facts.uptime = float(sections["uptime"].output.split()[0]) if "uptime" in sections else None

    registry = FactRegistry(lambda: SimpleNamespace(files={}, units={}),
                            [FactReader((FactSection("uptime", "cat /proc/uptime"),), parse)])
    token = gather.new_token()
    out = subprocess.run(["sh", "-c", registry.script(token)], capture_output=True, text=True).stdout
    facts = registry.parse(gather.split_sections(token, out))
    assert facts.uptime > 0 and facts.system.uid is not None


def test_the_files_section_reads_every_file_in_one_archive_with_its_exact_metadata(tmp_path):
    binary = tmp_path / "munge.key"
    binary.write_bytes(bytes(range(256)) * 4)
    setuid = tmp_path / "tool"
    setuid.write_text("#!/bin/sh\n")
    setuid.chmod(0o4755)
    link = tmp_path / "link.conf"
    link.symlink_to(setuid)
    directory = tmp_path / "a-directory"
    directory.mkdir()
    paths = [binary, setuid, link, directory, tmp_path / "absent"]
    facts = FACTS.parse(run_batch(tmp_path, [str(p) for p in paths]))
    got = {p: facts.files[str(p)] for p in paths}
    assert got[binary].content == bytes(range(256)) * 4
    assert got[binary].mtime == pytest.approx(binary.stat().st_mtime, abs=1e-6)
    assert got[setuid].mode == "4755" and got[setuid].owner == "root" and got[setuid].text == "#!/bin/sh\n"
    assert got[link].content == b"#!/bin/sh\n" and got[link].mode == "4755"  # the file it points to, as a read is
    assert got[directory].exists and got[directory].content is None
    assert got[tmp_path / "absent"].exists is False


def test_a_damaged_archive_leaves_the_files_there_with_their_bytes_unknown(tmp_path):
    (tmp_path / "a").write_text("a\n")
    token = gather.new_token()
    script = FACTS.script(token, reads=Reads((str(tmp_path / "a"),)))
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True).stdout
    cut = gather.split_sections(token, out)
    cut["files"].output = cut["files"].output[:cut["files"].output.index("archive") + 20]
    got = FACTS.parse(cut).files[str(tmp_path / "a")]
    assert got.exists and got.content is None


@pytest.fixture
def shared_dir():
    """A directory another user may enter (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="provision-files-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to run as another user")
def test_a_file_the_login_cannot_read_goes_through_sudo_or_says_what_stat_can(shared_dir):
    secret, public = shared_dir / "munge.key", shared_dir / "nccl.conf"
    secret.write_bytes(b"\x00key")
    secret.chmod(0o400)
    public.write_text("NCCL_DEBUG=WARN\n")
    public.chmod(0o644)

    def as_nobody(sudo: str):
        path = fake_bin(shared_dir, sudo=sudo)
        (shared_dir / "bin").chmod(0o755)
        token = gather.new_token()
        script = FACTS.script(token, reads=Reads((str(secret), str(public))))
        out = subprocess.run([shutil.which("runuser"), "-u", "nobody", "--", "sh", "-c", script],
                             capture_output=True, text=True, env={"PATH": path}).stdout
        return FACTS.parse(gather.split_sections(token, out)).files

    no_sudo = as_nobody("exit 1")
    assert no_sudo[str(secret)].exists and no_sudo[str(secret)].content is None
    assert (no_sudo[str(secret)].mode, no_sudo[str(secret)].owner) == ("400", "root")
    assert no_sudo[str(public)].text == "NCCL_DEBUG=WARN\n"
    log = shared_dir / "sudo.log"
    log.touch()
    log.chmod(0o666)
    with_sudo = as_nobody(f'echo "$*" >> {log}; [ "$1" = -n ] && shift; [ "$1" = true ] || exec "$@"')
    assert "-n tar -c" in log.read_text()  # the whole archive through sudo -n
    assert with_sudo[str(public)].text == "NCCL_DEBUG=WARN\n"

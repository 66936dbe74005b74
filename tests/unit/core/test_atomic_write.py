"""Files are written atomically with a backup of the old version, and only the newest backups are kept."""

from __future__ import annotations

import base64
import getpass
import grp
import os
import subprocess

from provision.core import remote


def write(path, text: str, stamp: str, keep: int) -> str:
    argv = remote.atomic_write_argv(str(path), "0640", getpass.getuser(), grp.getgrgid(os.getgid()).gr_name,
                                    stamp, keep)
    return subprocess.run(argv, input=text, text=True, capture_output=True, check=True).stdout


def test_each_write_keeps_the_old_version_and_only_the_newest_backups_stay(tmp_path):
    conf = tmp_path / "it's a conf"
    (tmp_path / "it's a conf.bak~").write_text("someone else's")
    for n, stamp in enumerate(["20261101T000000Z", "20261102T000000Z", "20261103T000000Z", "20261104T000000Z"]):
        write(conf, f"version {n}\n", stamp, keep=2)
    assert conf.read_text() == "version 3\n" and oct(conf.stat().st_mode)[-3:] == "640"
    backups = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith("Z~"))
    assert backups == ["it's a conf.20261103T000000Z~", "it's a conf.20261104T000000Z~"]
    assert [(tmp_path / b).read_text() for b in backups] == ["version 1\n", "version 2\n"]
    assert (tmp_path / "it's a conf.bak~").read_text() == "someone else's"


def test_keep_zero_keeps_no_backup(tmp_path):
    conf = tmp_path / "x.conf"
    write(conf, "a\n", "20261101T000000Z", keep=0)
    write(conf, "b\n", "20261102T000000Z", keep=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.conf"]


def test_a_binary_key_travels_as_base64_text_and_lands_as_its_bytes(tmp_path):
    key = bytes(range(256))
    argv = remote.atomic_write_argv(str(tmp_path / "munge.key"), "0400", getpass.getuser(),
                                    grp.getgrgid(os.getgid()).gr_name, "20261101T000000Z", 0, "base64")
    subprocess.run(argv, input=base64.b64encode(key).decode(), text=True, capture_output=True, check=True)
    assert (tmp_path / "munge.key").read_bytes() == key and oct((tmp_path / "munge.key").stat().st_mode)[-3:] == "400"

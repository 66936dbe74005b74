"""/boot/grub/grubenv as GRUB writes it, read by the next-boot section (capabilities/driver/nextboot.py).

The format, from GRUB's own source (rhboot/grub2: util/editenv.c grub_util_create_envblk_file, grub-core/lib/
envblk.c grub_envblk_set, include/grub/lib/envblk.h): a 1024-byte file that starts with the signature line
"# GRUB Environment Block", holds one "name=value" line per variable (a backslash or a newline in a value escaped by
a backslash) and is padded to its size with '#'; a variable set again is rewritten in place, the padding taking up
the difference. grub-reboot sets next_entry, grub-set-default saved_entry; GRUB's 00_header empties next_entry
(`set next_entry=` then `save_env next_entry`) at the boot that takes it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from provision.capabilities.driver import nextboot

SIGNATURE = "# GRUB Environment Block\n"
SIZE = 1024  # DEFAULT_ENVBLK_SIZE
OLD, NEW = "6.8.0-45-generic", "6.8.0-100-generic"


def escaped(value: str) -> str:
    """A value as grub_envblk_set writes it: a backslash before each backslash and newline."""
    return value.replace("\\", "\\\\").replace("\n", "\\\n")


def grubenv(**variables: str) -> bytes:
    """The block as grub-editenv leaves it after `create` and one `set NAME=VALUE` per variable, in order."""
    lines = "".join(f"{name}={escaped(value)}\n" for name, value in variables.items())
    body = (SIGNATURE + lines).encode()
    assert len(body) <= SIZE, "grub-editenv refuses a block that would outgrow its file"
    return body + b"#" * (SIZE - len(body))


def read(tmp_path: Path, block: bytes) -> nextboot.NextBoot:
    (tmp_path / "boot/grub").mkdir(parents=True)
    for kernel in (OLD, NEW):
        (tmp_path / f"boot/vmlinuz-{kernel}").write_text("")
    (tmp_path / "boot/grub/grubenv").write_bytes(block)
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/grub").write_text("GRUB_DEFAULT=saved\n")
    snippet = (nextboot.NEXTBOOT_SNIPPET.replace("/boot", f"{tmp_path}/boot")
               .replace("/lib/modules", f"{tmp_path}/lib/modules").replace("/etc/default", f"{tmp_path}/etc/default"))
    out = subprocess.run(["sh", "-c", snippet], capture_output=True, text=True, timeout=30).stdout
    return nextboot.parse_nextboot(out.replace(str(tmp_path), ""))


def test_a_fresh_block_is_the_signature_and_padding_and_names_no_entry(tmp_path: Path):
    block = grubenv()
    assert len(block) == SIZE and block.startswith(b"# GRUB Environment Block\n###")
    found = read(tmp_path, block)
    assert found.grubenv == {} and nextboot.next_kernel(found)[0] == NEW  # saved, nothing saved: the top entry


def test_grub_reboot_s_next_entry_and_the_saved_entry_are_read_from_the_padded_block(tmp_path: Path):
    saved = f"gnulinux-advanced-0b3c2f9e>gnulinux-{NEW}-advanced-0b3c2f9e"
    once = f"Advanced options for Ubuntu>Ubuntu, with Linux {OLD}"
    found = read(tmp_path, grubenv(saved_entry=saved, next_entry=once))
    assert found.grubenv == {"saved_entry": saved, "next_entry": once}
    assert nextboot.next_kernel(found) == (OLD, "next_entry in /boot/grub/grubenv (grub-reboot, this boot only)")


def test_after_the_boot_that_took_next_entry_it_is_empty_and_saved_entry_decides(tmp_path: Path):
    found = read(tmp_path, grubenv(saved_entry=f"Ubuntu, with Linux {OLD}", next_entry=""))
    assert found.grubenv == {"saved_entry": f"Ubuntu, with Linux {OLD}"}
    assert nextboot.next_kernel(found)[0] == OLD

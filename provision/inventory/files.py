"""Reading a file the inventory names (an inventory file, a variables file, `-e @FILE`, `--limit @FILE`,
ansible.cfg): a regular file only, and at most MAX_FILE_BYTES of it. A device, a FIFO or a socket is refused by
its kind before it is opened: `-i /dev/zero` would be read until memory ran out, and a FIFO blocks until a writer
comes. Ansible opens whatever it is given; provision refuses these on purpose."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from provision.core.errors import InputError, Problem
from provision.core.localfiles import not_a_file

# 64 MiB: what a file may cost in memory. Not a bound in time: PyYAML reads about a megabyte in 6 s on 2 busy cores,
# and a file is read in time proportional to its size; the bounds that a short file could pass are elsewhere.
MAX_FILE_BYTES = 64 * 1024 * 1024


def read_text(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; InputError naming the file and `what` it is
    read as ("inventory", "variables file") for anything else."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError([Problem(str(path), "", "", f"not a text file: byte {exc.start} is not UTF-8",
                                  f"{_article(what)} is a text file; is this the right path?")]) from None


def read_bytes(path: str | Path, what: str, limit: int = MAX_FILE_BYTES, whole: bool = True) -> bytes:
    """The bytes of a regular file: all of them, refused past `limit`; or, with whole=False, its first `limit`."""
    fd = _open(path, what)
    try:
        size = os.fstat(fd).st_size
        if whole and size > limit:
            raise _too_big(path, what, limit)
        chunks, left = [], limit + 1 if whole else limit  # one byte more: a file that grew since fstat
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise _unreadable(path, what, exc) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if whole and len(data) > limit:
        raise _too_big(path, what, limit)
    return data


def _open(path: str | Path, what: str) -> int:
    """A descriptor of the regular file `path`: its kind checked by stat before it is opened, then again on the
    descriptor (O_NONBLOCK: a FIFO put there in between does not block the open)."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISREG(mode):
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            mode = os.fstat(fd).st_mode
            if stat.S_ISREG(mode):
                return fd
            os.close(fd)
    except OSError as exc:
        raise _unreadable(path, what, exc) from None
    raise InputError([Problem(str(path), "", "", f"is {not_a_file(mode) or 'not a regular file'}, not a file: "
                              f"provision reads {_article(what)} from a regular file",
                              f"give the path of the {what} itself")])


def _unreadable(path: str | Path, what: str, exc: OSError) -> InputError:
    return InputError([Problem(str(path), "", "", f"cannot read {what}: {exc.strerror or exc}")])


def _too_big(path: str | Path, what: str, limit: int) -> InputError:
    return InputError([Problem(str(path), "", "", f"is larger than {size_words(limit)} (provision's limit for "
                               f"{_article(what)})", f"is this the {what} meant? split it into several files")])


def size_words(count: int) -> str:
    """A size in bytes, as a limit is said: "64 MiB", "2,000 bytes"."""
    return f"{count >> 20} MiB" if count >= 1 << 20 and count % (1 << 20) == 0 else f"{count:,} bytes"


def _article(what: str) -> str:
    return what if what.startswith(("the ", "a ", "an ")) else f"{'an' if what[0] in 'aeiou' else 'a'} {what}"

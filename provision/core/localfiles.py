"""Files on this machine: read bounded, written checked.

Read (read_text, read_bytes): a file the inventory names (an inventory file, a variables file, `-e @FILE`,
`--limit @FILE`, ansible.cfg) or a template of --templates DIR: a regular file only, and at most a limit of it
(MAX_FILE_BYTES unless its reader says less). A device, a FIFO or a socket is refused by its kind before it is
opened: `-i /dev/zero` would be read until memory ran out, and a FIFO blocks until a writer comes. Ansible opens
whatever it is given; provision refuses these on purpose.

Written (--log, --prometheus, --junitxml): checked before the inventory is read and any host contacted
(check_writable): a run must not end in a file it cannot write after every host was worked on. When writing
still fails at the end (the disk filled, the directory went meanwhile), the results are printed all the same,
the file is named with why, and the exit code has core/results.py's EXIT_NOT_WRITTEN (not_written).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from provision.core.errors import InputError, Problem

KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))

# 64 MiB: what a file may cost in memory. Not a bound in time: PyYAML reads about a megabyte in 6 s on 2 busy cores,
# and a file is read in time proportional to its size; the bounds that a short file could pass are elsewhere.
MAX_FILE_BYTES = 64 * 1024 * 1024


def not_a_file(mode: int | None) -> str:
    """What a stat mode is when it is no regular file ("a directory", "a FIFO"...); "" for a file or None."""
    return next((words for test, words in KINDS if mode is not None and test(mode)), "")


def read_text(path: str | Path, what: str, limit: int = MAX_FILE_BYTES, follow: bool = True) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; InputError naming the file and `what` it is
    read as ("inventory", "variables file") for anything else. follow=False: a symbolic link is refused, not
    followed (O_NOFOLLOW), where the caller has checked the path a link could be swapped in for."""
    data = read_bytes(path, what, limit, follow=follow)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError([Problem(str(path), "", "", f"not a text file: byte {exc.start} is not UTF-8",
                                  f"{_article(what)} is a text file; is this the right path?")]) from None


def read_bytes(path: str | Path, what: str, limit: int = MAX_FILE_BYTES, whole: bool = True,
               follow: bool = True) -> bytes:
    """The bytes of a regular file: all of them, refused past `limit`; or, with whole=False, its first `limit`."""
    fd = _open(path, what, follow)
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


def _open(path: str | Path, what: str, follow: bool = True) -> int:
    """A descriptor of the regular file `path`: its kind checked by stat before it is opened, then again on the
    descriptor (O_NONBLOCK: a FIFO put there in between does not block the open)."""
    try:
        mode = os.stat(path, follow_symlinks=follow).st_mode
        if stat.S_ISREG(mode):
            links = 0 if follow else os.O_NOFOLLOW  # a link swapped in since the stat: ELOOP, not followed
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | links)
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


def check_writable(path: str | os.PathLike[str], option: str, *, append: bool = False,
                   make_directory: bool = False) -> Path:
    """`path` as a file that can be written: not a directory, a device, a FIFO or a socket; its directory there
    (made, where the writer would make it) and writable. append: the file is added to (the run log), so an
    existing one must take writes itself; else it is replaced, which only its directory decides."""
    file = Path(path)

    def refuse(why: str, hint: str = "") -> InputError:
        return InputError([Problem("command line", "", option, f"{str(path)!r}: {why}", hint or
                                   f"{option} names a file to write, in a directory that exists and can be written")])

    if not str(path):
        raise refuse("no file named")
    try:
        mode = file.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:  # a part of it is a file (ENOTDIR), a name too long, a loop of links, no permission
        raise refuse(f"cannot be looked at: {exc.strerror or exc}") from None
    if kind := not_a_file(mode):
        raise refuse(f"is {kind}, not a file", f"name a file in it: {option} {file / 'FILE'}"
                     if kind == "a directory" else "")
    directory = file.parent
    if make_directory:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise refuse(f"its directory {str(directory)!r} cannot be made: {exc.strerror or exc}") from None
    elif not directory.is_dir():
        raise refuse(f"its directory {str(directory)!r} does not exist", "make the directory first, or name "
                     "a file in one that exists")
    try:
        if append and mode is not None:
            with open(file, "a"):  # nothing written: opening for appending is the test
                pass
        else:  # a file made and removed where the writer makes its own
            fd, probe = tempfile.mkstemp(dir=directory, prefix=f".{file.name}.")
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise refuse(f"cannot be written there: {exc.strerror or exc}") from None
    return file


def write_atomically(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """The whole file or none of it (CONTRIBUTING, Style): a temporary file beside it, renamed over it."""
    file = Path(path)
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def not_written(option: str, path: str | os.PathLike[str], write: Callable[[], object]) -> str:
    """'' once write() wrote the file; else what to tell the user (the run's results stand: exit with
    EXIT_NOT_WRITTEN)."""
    try:
        write()
    except OSError as exc:
        return f"{option} {path}: not written: {exc.strerror or exc}"
    return ""

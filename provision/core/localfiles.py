"""Files a command writes on this machine (--log, --prometheus, --junitxml).

Checked before the inventory is read and any host contacted (check_writable): a run must not end in a file
it cannot write after every host was worked on. When writing still fails at the end (the disk filled, the
directory went meanwhile), the results are printed all the same, the file is named with why, and the exit
code has core/results.py's EXIT_NOT_WRITTEN (not_written).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from provision.core.errors import InputError, Problem

KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def not_a_file(mode: int | None) -> str:
    """What a stat mode is when it is no regular file ("a directory", "a FIFO"...); "" for a file or None."""
    return next((words for test, words in KINDS if mode is not None and test(mode)), "")


def check_writable(path: str | os.PathLike, option: str, *, append: bool = False,
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


def write_atomically(path: str | os.PathLike, data: bytes, mode: int = 0o644) -> None:
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


def not_written(option: str, path: str | os.PathLike, write: Callable[[], object]) -> str:
    """'' once write() wrote the file; else what to tell the user (the run's results stand: exit with
    EXIT_NOT_WRITTEN)."""
    try:
        write()
    except OSError as exc:
        return f"{option} {path}: not written: {exc.strerror or exc}"
    return ""

"""Small POSIX sh programs run on hosts. Values always travel as positional arguments ("$1"), never pasted in."""

from __future__ import annotations

import base64
import shlex

# Write stdin to $1 atomically: temp file in the same directory, mode and owner
# set before the rename, and the previous version kept as "$1.<time>~"
# (a hard link: the old inode survives the rename, so nothing is copied or lost).
# Once the new file is in place the old inode is only the backup: it is made owner-only (go-rwx), never wider
# than the file was, so a secret that leaked into a world-readable file and is then put right does not stay
# readable to every user in its backup (a backup that is a symlink, the old dest, is left: chmod would follow it).
# Only the newest $6 such backups stay (their names sort by time; others' files are never touched).
# With $7 = base64, stdin is base64 text and the file gets the bytes it encodes (a key: stdin carries text).
ATOMIC_WRITE = r'''set -eu
dest=$1 mode=$2 owner=$3 group=$4 stamp=$5 keep=$6 encoding=${7:-}
case $dest in */*) dir=${dest%/*} ;; *) dir=. ;; esac
[ -d "${dir:-/}" ] || mkdir -p "$dir"
tmp=$(mktemp "${dir:-}/.provision.XXXXXX")  # mode 600 until its own
trap 'rm -f "$tmp"' EXIT
if [ "$encoding" = base64 ]; then base64 -d > "$tmp"; else cat > "$tmp"; fi
chmod "$mode" "$tmp"
chown "$owner:$group" "$tmp"
if [ -e "$dest" ]; then ln -f "$dest" "$dest.$stamp~" 2>/dev/null || cp -p "$dest" "$dest.$stamp~"; fi
mv -f "$tmp" "$dest"
trap - EXIT
backup=$dest.$stamp~
if [ -e "$backup" ] && [ ! -L "$backup" ]; then chmod go-rwx "$backup"; fi
set -- "$dest".[0-9]*T[0-9]*Z~
if [ -e "$1" ] && [ $# -gt "$keep" ]; then
  extra=$(($# - keep))
  for old do [ "$extra" -gt 0 ] || break; rm -f "$old"; extra=$((extra - 1)); done
fi
echo "$dest.$stamp~"
'''


def atomic_write_argv(path: str, mode: str, owner: str, group: str, stamp: str, keep: int = 3,
                      encoding: str = "") -> list[str]:
    return ["sh", "-c", ATOMIC_WRITE, "provision-write", path, mode, owner, group, stamp, str(keep), encoding]


# Replace $1/$2 with the line $3, atomically (a small state record, no backup kept).
WRITE_RECORD = r'''set -eu
mkdir -p "$1"
printf '%s\n' "$3" > "$1/.$2.tmp"
mv -f "$1/.$2.tmp" "$1/$2"
'''


def write_record_argv(directory: str, name: str, line: str) -> list[str]:
    return ["sh", "-c", WRITE_RECORD, "provision-record", directory, name, line]


def command_batch(token: str, command_lists: list[list[list[str]]],
                  inputs: dict[tuple[int, int], str] | None = None, needs: dict[int, list[int]] | None = None) -> str:
    """One sh script for several changes' commands: each change's list runs in order in its own subshell and
    stops at its first failure; changes never stop each other. Each command's output is framed like the
    facts batch's sections ("@@TOKEN i.j" ... "@@TOKEN i.j rc=N"), for gather.split_sections.
    A command given an input (inputs: (i, j) -> a name) reads it on stdin: the inputs travel as the batch's own
    stdin (batch_stdin), unpacked first into a private directory that is removed when the script ends, however
    it ends short of SIGKILL; every other command reads /dev/null.
    needs: i -> the earlier lists that must have succeeded for list i to run (a change's preparing commands)."""
    inputs, needs = inputs or {}, needs or {}
    needed = {k for ks in needs.values() for k in ks}
    lines = ["exec 2>&1"]
    if inputs:  # in RAM where /run is writable (a munge key never touches a disk), else $TMPDIR
        lines += ["stage=$(mktemp -d /run/provision-batch.XXXXXX 2>/dev/null || mktemp -d) || exit 1",
                  "trap 'rm -rf \"$stage\"' EXIT",
                  "trap 'exit 1' HUP INT PIPE TERM",
                  f"awk -v dir=\"$stage\" -v mark={shlex.quote('@@' + token)} "
                  + shlex.quote('$1 == mark { if (f) close(f); f = dir "/" $2; printf "" > f; next } { print > f }')
                  + " || exit 1",
                  'for f in "$stage"/*; do base64 -d < "$f" > "$f.bytes" && rm -f "$f" || exit 1; done']
    for i, commands in enumerate(command_lists):
        steps = []
        for j, argv in enumerate(commands):
            marker = shlex.quote(f"@@{token} {i}.{j}")
            given = f'< "$stage"/{shlex.quote(inputs[(i, j)] + ".bytes")}' if (i, j) in inputs else "</dev/null"
            steps.append(f"echo {marker}; {shlex.join(argv)} {given}; rc=$?; echo; echo {marker} rc=$rc; "
                         "[ $rc = 0 ] || exit")
        if steps:  # a change carried by another's command has none (an empty subshell is a syntax error)
            guard = "".join(f"[ $ok{k} = 0 ] && " for k in needs.get(i, []))
            lines.append(guard + "(\n" + "\n".join(steps) + "\n)" + (f"; ok{i}=$?" if i in needed else ""))
    return "\n".join(lines) + "\n"


def batch_stdin(token: str, inputs: dict[str, bytes]) -> str:
    """The batch's stdin: each input as base64 lines after a "@@TOKEN NAME" line (base64 never holds the token)."""
    return "".join(f"@@{token} {name}\n" + base64.encodebytes(data).decode() for name, data in inputs.items())

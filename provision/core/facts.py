"""Gather every fact a run needs with ONE remote command per host: the batch, and the registry of its sections.

The batch is a POSIX sh script made of sections. Each section runs one
command and is framed by markers carrying a per-run token, so the output of
one command can never be mistaken for a marker. Paths that come from the
inventory are passed as quoted words (shlex.quote), never pasted raw.

Each capability declares its sections (FactSection: a snippet, who reads it)
and one parser that sets its fields on the host's facts (FactReader); the
FactRegistry the capabilities' registry builds puts them in the batch.
The core's own sections are here: who the host is (hostname, uid, sudo, ...)
and the reads the tasks ask for (Reads: files, systemd units, packages).
"""

from __future__ import annotations

import base64
import io
import secrets
import shlex
import tarfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from provision.core import dpkg
from provision.core.text import number

PURPOSES = frozenset({"apply", "facts", "verify"})  # which command reads: apply (and the ad-hoc ones), facts, verify

UNIT_STATES = {"enabled", "enabled-runtime", "linked", "linked-runtime", "alias", "masked", "masked-runtime",
               "static", "indirect", "disabled", "generated", "transient", "bad"}  # systemctl is-enabled


@dataclass
class Section:
    rc: int
    output: str


@dataclass(frozen=True)
class FactSection:
    """One command of the batch."""

    name: str
    snippet: str | Callable[[], str]  # a callable for a snippet that reads the environment when the batch is built
    read_by: frozenset[str] = PURPOSES  # the commands that read it (health sections: verify only)
    # A section costly to read (nvidia-smi) names the HostFacts fields its parser sets: after a batch it is read
    # again only when a change of the batch alters one of them (Task.alters), else they are carried over.
    # Empty: read again after every batch.
    refresh_on: frozenset[str] = frozenset()
    keep: str = ""  # a shell variable its output is kept in, for a later section (nvidia-smi runs once)
    on_request: bool = False  # apply reads it only for a task that asks (Task.fact_sections): few tasks need it

    def text(self) -> str:
        return self.snippet() if callable(self.snippet) else self.snippet

    def stands(self, altered: frozenset[str]) -> bool:
        """Whether what it read before stands after changes that altered these fact keys."""
        return bool(self.refresh_on) and not overlaps(self.refresh_on, altered)


EVERYTHING = frozenset({"*"})  # what a read that follows no batch takes as altered: every section is read


def overlaps(names: frozenset[str], others: frozenset[str]) -> bool:
    """Whether two sets of fact names (Task.plans_from, Task.alters, FactSection.refresh_on) share a fact:
    "nvidia" holds "nvidia.power_limit", and "*" holds everything."""
    return any(a == "*" or b == "*" or a == b or a.startswith(b + ".") or b.startswith(a + ".")
               for a in names for b in others)


@dataclass(frozen=True)
class FactReader:
    """A capability's share of the batch: its sections and the parser that sets its fields on the facts.
    The parser gets every section read (a missing one was not read: its field keeps its default)."""

    sections: tuple[FactSection, ...]
    parse: Callable[[dict[str, Section], Any], None]


@dataclass(frozen=True)
class Reads:
    """What a run's tasks read beyond the sections: files, systemd units, installed package versions."""

    paths: tuple[str, ...] = ()
    units: tuple[UnitRef, ...] = ()
    packages: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()  # the on-request sections a task needs (FactSection.on_request)

    @staticmethod
    def union(reads: Iterable[Reads]) -> Reads:
        reads = list(reads)
        return Reads(tuple(sorted({p for r in reads for p in r.paths})),
                     tuple(sorted({u for r in reads for u in r.units})),
                     tuple(sorted({p for r in reads for p in r.packages})),
                     tuple(sorted({s for r in reads for s in r.sections})))


def build_script(token: str, sections: dict[str, FactSection]) -> str:
    """The batch as one sh script. Each section: begin marker, output, end marker + rc."""
    lines = ["exec 2>&1"]
    for name, section in sections.items():
        marker = shlex.quote(f"@@{token} {name}")
        if section.keep:  # kept for a later section: the command runs once
            lines.append(f"echo {marker}; {section.keep}=$( ( {section.text()} ) 2>&1 ); rc=$?; "
                         f"printf '%s\\n' \"${section.keep}\"; echo; echo {marker} rc=$rc")
        else:
            lines.append(f"echo {marker}; ( {section.text()} ); rc=$?; echo; echo {marker} rc=$rc")
    return "\n".join(lines) + "\n"


def split_sections(token: str, output: str) -> dict[str, Section]:
    """Split the batch output back into sections. Tolerates a section that printed no newline."""
    sections: dict[str, Section] = {}
    prefix = f"@@{token} "
    current: str | None = None
    body: list[str] = []
    for line in output.splitlines():
        if not line.startswith(prefix):
            body.append(line)
            continue
        name, _, rc = line[len(prefix):].partition(" rc=")
        if current is None:
            current, body = name, []
        else:
            # The script echoes an extra newline before the end marker.
            if body and body[-1] == "":
                body.pop()
            sections[current] = Section(int(rc or 1), "\n".join(body))
            current = None
    return sections


def new_token() -> str:
    return secrets.token_hex(8)


class FactRegistry:
    """The batch of a run: the core's sections, then every capability's (in the order given), then the reads."""

    def __init__(self, new_facts: Callable[[], Any], readers: Sequence[FactReader]):
        self.new_facts = new_facts
        self.readers = (SYSTEM, *readers)
        names = [s.name for r in self.readers for s in r.sections]
        if len(names) != len(set(names)):
            raise ValueError(f"two fact sections share a name: {sorted(n for n in names if names.count(n) > 1)}")
        blank = new_facts()
        unknown = sorted({f for r in self.readers for s in r.sections for f in s.refresh_on if not hasattr(blank, f)})
        if unknown:  # carried over by name (carry): a field the facts do not have would be set, never read
            raise ValueError(f"refresh_on names no field of the facts: {unknown}")

    def sections(self, purpose: str = "apply", reads: Reads = Reads(), altered: frozenset[str] = EVERYTHING,
                 before: dict[str, list[str]] | None = None, after: dict[str, list[str]] | None = None,
                 facts: bool = True) -> dict[str, FactSection]:
        """The sections of one batch. before and after: commands run first and last, each a section of its own
        name (the host lock taken first and given back last, so a run costs no extra round trip for them).
        altered: the fact keys the changes since the last read altered; a section whose read stands after them
        (FactSection.stands) is left out. facts=False: only those commands."""
        if purpose not in PURPOSES:
            raise ValueError(f"{purpose!r}: not one of {sorted(PURPOSES)}")
        chosen = {name: FactSection(name, shlex.join(argv)) for name, argv in (before or {}).items()}
        if facts:
            chosen.update(self._fact_sections(purpose, reads, altered))
        chosen.update((name, FactSection(name, shlex.join(argv))) for name, argv in (after or {}).items())
        return chosen

    def _wanted(self, purpose: str, reads: Reads) -> list[FactSection]:
        """The capabilities' sections this command reads."""
        return [s for r in self.readers for s in r.sections if purpose in s.read_by
                and (purpose != "apply" or not s.on_request or s.name in reads.sections)]

    def _fact_sections(self, purpose: str, reads: Reads, altered: frozenset[str]) -> dict[str, FactSection]:
        chosen = {s.name: s for s in self._wanted(purpose, reads) if not s.stands(altered)}
        if reads.packages:
            chosen["packages"] = FactSection("packages", packages_snippet(list(reads.packages)))
        if reads.paths:
            chosen["files"] = FactSection("files", FILES_SNIPPET.format(paths=" ".join(map(shlex.quote, reads.paths))))
        for unit in reads.units:
            chosen[f"unit:{unit.key}"] = FactSection(f"unit:{unit.key}", shlex.join(unit.systemctl("is-enabled")))
        return chosen

    def script(self, token: str, purpose: str = "apply", reads: Reads = Reads(),
               altered: frozenset[str] = EVERYTHING, before: dict[str, list[str]] | None = None,
               after: dict[str, list[str]] | None = None, facts: bool = True) -> str:
        return build_script(token, self.sections(purpose, reads, altered, before, after, facts))

    def carry(self, before: Any, fresh: Any, purpose: str, reads: Reads, altered: frozenset[str]) -> None:
        """Set on fresh, from the facts read before, the fields of the sections a read after changes that
        altered these keys left out (their read stands)."""
        for name in {f for s in self._wanted(purpose, reads) if s.stands(altered) for f in s.refresh_on}:
            setattr(fresh, name, getattr(before, name))

    def parse(self, sections: dict[str, Section]) -> Any:
        """The host's facts from a batch's sections."""
        facts = self.new_facts()
        for reader in self.readers:
            reader.parse(sections, facts)
        if "packages" in sections:
            facts.packages = parse_packages(sections["packages"].output)
            facts.held = parse_held(sections["packages"].output)
        if "files" in sections:
            facts.files.update(parse_files(sections["files"].output))
        for name, section in sections.items():
            if name.startswith("unit:"):
                state = section.output.strip().splitlines()[-1:] or [""]
                # is-enabled prints a state word; a missing unit prints an error (and exits non-zero)
                facts.units[name[len("unit:"):]] = state[0] if state[0] in UNIT_STATES else "not-found"
        return facts


def _parse_system(sections: dict[str, Section], facts: Any) -> None:
    def out(name: str) -> str:
        section = sections.get(name)
        return section.output.strip() if section and section.rc == 0 else ""

    os_release = dict(
        line.split("=", 1) for line in out("os-release").splitlines() if "=" in line
    )
    uid = out("uid")
    facts.system = SystemFacts(
        hostname=out("hostname"),
        uid=int(uid) if uid.isdigit() else None,
        os_id=os_release.get("ID", "").strip('"'),
        os_version=os_release.get("VERSION_ID", "").strip('"'),
        systemd_running=sections.get("systemd", Section(1, "")).rc == 0,
        sudo_nopasswd=sections.get("sudo", Section(1, "")).rc == 0,
        machine_id=out("machine-id"),
    )


def text_of(path: str) -> str:
    """A snippet that prints a text file as `cat` does, with the shell's own read: no process. path: a shell
    word (quoted by the caller, or a "$variable"). Exits non-zero when the file cannot be opened. For small text
    files (/proc, /etc, records): dash reads a byte per system call, and a NUL byte would be lost."""
    return f"while IFS= read -r l || [ -n \"$l\" ]; do printf '%s\\n' \"$l\"; done 2>/dev/null <{path}"


# Who the host is, and how privileged commands will run there: every batch reads these.
SYSTEM = FactReader((
    FactSection("hostname", f"{text_of('/proc/sys/kernel/hostname')} || hostname"),
    # The effective uid (id -u's), from the kernel's own line for this shell: "Uid: real effective saved fs".
    FactSection("uid", "while read -r k _ e _; do [ \"$k\" = Uid: ] && echo \"$e\" && exit 0; done "
                       "2>/dev/null </proc/self/status; id -u", keep="uid"),
    FactSection("os-release", text_of("/etc/os-release")),
    FactSection("machine-id", text_of("/etc/machine-id")),
    FactSection("systemd", "test -d /run/systemd/system"),
    # -k ignores cached credentials: success means NOPASSWD, not a warm cache.
    FactSection("sudo", '[ "$uid" = 0 ] || sudo -k -n true'),  # $uid: the uid section's output
), _parse_system)


def packages_snippet(names: list[str]) -> str:
    """"asked NAMES", then one line per package dpkg knows: NAME VERSION STATUS (ii: installed, hi: held)."""
    return f"echo asked {shlex.join(names)}; {dpkg.status_snippet(names)}"


def parse_packages(text: str) -> dict[str, str | None]:
    """Each asked name -> its installed version, None when not installed (unknown, removed, config left)."""
    lines = text.splitlines()
    asked = lines[0].split()[1:] if lines and lines[0].startswith("asked") else []
    found: dict[str, str | None] = dict.fromkeys(asked)
    for line in lines[1:]:
        words = line.split()
        if len(words) >= 3 and words[0] in found and words[2][1:2] == "i":
            found[words[0]] = words[1]
    return found


def parse_held(text: str) -> list[str]:
    """The asked packages that are installed and on hold (dpkg's selection "hold": the h of hi)."""
    return sorted(words[0] for words in (line.split() for line in text.splitlines()[1:])
                  if len(words) >= 3 and words[2][:2] == "hi")


# The files the tasks read, in one section: "exists PATH" or "absent PATH" for each, then "archive" and the
# existing ones as one POSIX tar (mode, owner, group, mtime to the nanosecond, and the bytes), in base64. tar
# follows links (-h), as reading the file does. A file only root may read (a munge key) makes the whole archive
# go through sudo -n where the login is not root; without sudo, "stat MODE OWNER GROUP MTIME PATH" says what
# is known of each such file, its bytes unknown. tar and base64 are two processes for any number of files
# (a stat and a base64 per file before).
FILES_SNIPPET = r'''set --; n=
for p in {paths}; do
  if [ -e "$p" ]; then printf 'exists %s\n' "$p"; set -- "$@" "$p"; [ -r "$p" ] || n=1
  else printf 'absent %s\n' "$p"; fi
done
[ $# -gt 0 ] || exit 0
s=
if [ -n "$n" ]; then
  if sudo -n true 2>/dev/null; then s='sudo -n'
  else for p in "$@"; do [ -r "$p" ] || stat -c 'stat %a %U %G %.3Y %n' -- "$p"; done; fi
fi
echo archive
$s tar -c --format=posix -b 1 -h -P --no-recursion -f - -- "$@" 2>/dev/null | base64'''


def parse_files(text: str) -> dict[str, FileFacts]:
    """FILES_SNIPPET's output: each asked path's FileFacts. A file there but missing from the archive (not
    readable, or the archive cut short) has its content None: there, its bytes unknown."""
    found: dict[str, FileFacts] = {}
    lines = text.split("\n")
    for at, line in enumerate(lines):
        kind, _, rest = line.partition(" ")
        if kind in ("exists", "absent"):
            found[rest] = FileFacts(path=rest, exists=kind == "exists")
        elif kind == "stat":
            mode, owner, group, mtime, path = (rest.split(" ", 4) + [""] * 5)[:5]
            if path in found:
                found[path] = FileFacts(path, True, None, mode, owner, group, number(mtime))
        elif line == "archive":
            for member, content in _members("".join(lines[at + 1:])):
                if member.name in found:
                    found[member.name] = FileFacts(
                        member.name, True, content, format(member.mode & 0o7777, "o"),
                        member.uname or str(member.uid), member.gname or str(member.gid), float(member.mtime))
            break
    return found


def _members(encoded: str) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """The archive's entries with the bytes of each regular file; what could be read of a damaged one."""
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(encoded, validate=True)), mode="r:") as archive:
            for member in archive:
                # A second name of a file already in the archive (a link to it: tar -h) is a hard link entry.
                stream = archive.extractfile(member) if member.isreg() or member.islnk() else None
                members.append((member, stream.read() if stream else None))
    except (ValueError, tarfile.TarError, EOFError, OSError):
        pass
    return members


@dataclass
class FileFacts:
    """A file the tasks manage, as it is on the host now."""

    path: str
    exists: bool = False
    content: bytes | None = None
    mode: str | None = None  # octal, e.g. "644"
    owner: str | None = None
    group: str | None = None
    mtime: float | None = None  # seconds since the epoch

    @property
    def text(self) -> str | None:
        """The content as text; None when the file is absent, or there and unreadable to us."""
        return self.content.decode("utf-8", "replace") if self.exists and self.content is not None else None


@dataclass
class SystemFacts:
    hostname: str = ""
    uid: int | None = None
    os_id: str = ""  # ID from /etc/os-release
    os_version: str = ""  # VERSION_ID
    systemd_running: bool = False  # /run/systemd/system exists
    sudo_nopasswd: bool = False  # "sudo -k -n true" succeeded
    machine_id: str = ""  # /etc/machine-id: the same machine, however it is reached (never reboot the control one)


@dataclass(frozen=True, order=True)
class UnitRef:
    """A systemd unit whose enabled state a task reads: on the host, or in a tree under `root`
    (`systemctl --root`, as when preparing an image; the demo uses one)."""

    name: str
    root: str | None = None

    @property
    def key(self) -> str:
        """Its key in HostFacts.units."""
        return self.name if self.root is None else f"{self.root}:{self.name}"

    def systemctl(self, *args: str) -> list[str]:
        return ["systemctl", *([f"--root={self.root}"] if self.root else []), *args, self.name]

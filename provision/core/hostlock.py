"""The host lock: two runs never change one host at once, and a lock can never strand a host.

A run takes the lock only to change a host (in the same command that reads it again, see core/facts.py)
and gives it back as soon as that host is done. The lock is a directory on the host's tmpfs (a reboot
clears it) holding one owner line: who took it, from which control machine and process, and a lease:

    provision apply by ops@ctl pid 4242 since 2026-11-24T08:00:00Z; run=1f2e... machine=3d12... boot=b6e5...
        pidstart=123456 lease_until=1764000000

Held by someone else, it is respected unless it can be judged stale: its owner ran on this control machine
and that process is gone (the pid no longer runs, was reused, or the machine booted since), or its lease
expired on the host's own clock without the heartbeat a live run sends (a run from another machine that
died). A stale lock is taken over in one step on the host (compare-and-swap under flock), with a notice
naming the old owner. A lock that cannot be judged (an old format, a live run) waits; `provision unlock`
is the way out.
"""

from __future__ import annotations

import getpass
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from provision.core.connection import Connection, Unreachable
from provision.core.errors import ProvisionError

if TYPE_CHECKING:  # types only
    from provision.core.facts import Section
    from provision.core.stopping import Stop
    from provision.inventory.model import Host

Notice = Callable[[str], None]  # says one line to the user (the run's notice)

LOCK_DIR = "/run/lock/provision.lock"
LEASE_SECONDS = 120  # a lock not renewed for this long is free to take (the heartbeat renews it)
HEARTBEAT_SECONDS = 30  # how often a run renews the leases of the hosts it holds

# Every script runs under flock on "$d.guard" where flock exists (util-linux): taking over a stale lock
# is a read-compare-write that two runs must not interleave. Without flock the window is one sh command.
# A lock directory the login user cannot write is said as such (exit 2), never taken for someone's lock.
_GUARD = r'''d=$1 run=$2
mkdir -p "${d%/*}" 2>/dev/null
[ -w "${d%/*}" ] || { echo "cannot: ${d%/*} is not writable by $(id -un)"; exit 2; }
if command -v flock >/dev/null 2>&1 && { [ -w "$d.guard" ] || [ ! -e "$d.guard" ]; }; then
  exec 9>>"$d.guard"; flock -w 30 9
fi
held=$(cat "$d/owner" 2>/dev/null || true)
case " $held " in *" run=$run "*) ours=1 ;; *) ours=0 ;; esac
'''

# $3: our owner line, $4: lease seconds, $5: a holder's exact line the control machine judged stale.
# Prints "taken", "took over: LINE" (stale or expired), or "held: LINE" and exits 1.
TAKE = _GUARD + r'''owner=$3 lease=$4 stale=${5:-}
now=$(date +%s)
if mkdir "$d" 2>/dev/null || [ $ours = 1 ]; then echo taken
elif [ -z "$held" ]; then echo "took over: an empty lock (a run killed while taking it)"
elif [ -n "$stale" ] && [ "$held" = "$stale" ]; then echo "took over: $held"
else
  until=${held##*lease_until=}; until=${until%% *}
  case $until in ''|*[!0-9]*) until='' ;; esac
  if [ -n "$until" ] && [ "$now" -gt "$until" ]; then echo "took over (lease expired): $held"
  else printf 'held: %s\n' "$held"; exit 1; fi
fi
printf '%s lease_until=%s\n' "$owner" $((now + lease)) > "$d/.owner.tmp" && mv -f "$d/.owner.tmp" "$d/owner"
'''

# $3: lease seconds. Renews our lease; "lost: LINE" if the lock is no longer ours.
RENEW = _GUARD + r'''[ $ours = 1 ] || { printf 'lost: %s\n' "${held:-nobody}"; exit 1; }
printf '%s lease_until=%s\n' "${held% lease_until=*}" $(($(date +%s) + $3)) > "$d/.owner.tmp" && mv -f "$d/.owner.tmp" "$d/owner"
'''

# Every release or removal writes "$d.gen" anew (who, when, which shell): a run that read a host, then takes its
# lock without a wait, reads it again only when this line changed since (another run held the lock in between)
# or the host booted since (generation_argv).
_NEXT_GENERATION = r'''printf '%s %s %s\n' "$run" "$(date +%s)" "$$" > "$d.gen.tmp" && mv -f "$d.gen.tmp" "$d.gen"
'''

# Releases our own lock only.
RELEASE = _GUARD + r'''[ $ours = 1 ] || exit 0
rm -rf "$d"
''' + _NEXT_GENERATION + "exit 0\n"

# `provision unlock`: removes the lock if its owner line is still $3 (what the user was shown).
REMOVE = _GUARD + r'''[ -d "$d" ] || { echo none; exit 0; }
[ "$held" = "$3" ] || { printf 'changed: %s\n' "${held:-unknown}"; exit 1; }
rm -rf "$d" && echo removed
run=removed
''' + _NEXT_GENERATION

# Who holds the lock now: the owner line, or nothing.
READ = r'''cat "$1/owner" 2>/dev/null || { [ -d "$1" ] && echo; }; true'''


def take_argv(owner: "Owner", stale_line: str = "", lock_dir: str | None = None) -> list[str]:
    return ["sh", "-c", TAKE, "provision-lock", lock_dir or LOCK_DIR, owner.run, owner.line(), str(LEASE_SECONDS),
            stale_line]


def renew_argv(owner: "Owner", lock_dir: str | None = None) -> list[str]:
    return ["sh", "-c", RENEW, "provision-lock-renew", lock_dir or LOCK_DIR, owner.run, str(LEASE_SECONDS)]


def release_argv(owner: "Owner", lock_dir: str | None = None) -> list[str]:
    return ["sh", "-c", RELEASE, "provision-unlock", lock_dir or LOCK_DIR, owner.run]


def remove_argv(line: str, lock_dir: str | None = None) -> list[str]:
    return ["sh", "-c", REMOVE, "provision-unlock", lock_dir or LOCK_DIR, "-", line]


def generation_argv(lock_dir: str | None = None) -> list[str]:
    """The host's lock generation (the last release's line) and boot id: unchanged between a read and a lock
    taken without a wait, no other run changed the host in between."""
    return ["sh", "-c", 'cat "$1.gen" 2>/dev/null; cat /proc/sys/kernel/random/boot_id 2>/dev/null; true',
            "provision-lock-generation", lock_dir or LOCK_DIR]


def read_argv(lock_dir: str | None = None) -> list[str]:
    return ["sh", "-c", READ, "provision-lock-read", lock_dir or LOCK_DIR]


# --- who we are, and whether a holder on this machine still runs ------------------------------------------

def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def machine_id() -> str:
    """This control machine: /etc/machine-id (unique per installation), else its host name."""
    return _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id") or socket.gethostname()


def boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


def process_start(pid: int) -> str:
    """When pid started, in clock ticks since boot (/proc/PID/stat field 22): tells a reused pid apart.
    "" when no such process runs."""
    stat = _read(f"/proc/{pid}/stat")
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces and ")"
    return fields[19] if len(fields) > 19 else ""


@dataclass(frozen=True)
class Owner:
    """Who holds (or wants) a host's lock. `said`: the words for people; the rest, to judge it stale."""

    said: str
    run: str = ""
    machine: str = ""
    boot: str = ""
    pid: int | None = None
    pidstart: str = ""
    lease_until: int | None = None

    @classmethod
    def this_run(cls, command: str) -> "Owner":
        pid = os.getpid()
        since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        said = f"provision {command} by {getpass.getuser()}@{socket.gethostname()} pid {pid} since {since}"
        return cls(said, uuid.uuid4().hex[:12], machine_id(), boot_id(), pid, process_start(pid))

    def line(self) -> str:
        """The owner line as written on the host (the take script adds lease_until)."""
        return (f"{self.said}; run={self.run} machine={self.machine} boot={self.boot} pid={self.pid} "
                f"pidstart={self.pidstart}")

    @classmethod
    def parse(cls, line: str) -> "Owner":
        """An owner line as the host has it; an older or foreign line is kept as words to show."""
        said, _, tail = line.strip().partition("; run=")
        if not tail:
            return cls(line.strip() or "unknown")
        words = dict(w.split("=", 1) for w in f"run={tail}".split() if "=" in w)
        pid, until = words.get("pid", ""), words.get("lease_until", "")
        return cls(said, words.get("run", ""), words.get("machine", ""), words.get("boot", ""),
                   int(pid) if pid.isdigit() else None, words.get("pidstart", ""),
                   int(until) if until.isdigit() else None)

    def gone_here(self) -> str:
        """Why this lock is stale, judged on this control machine; "" when it is not ours to judge (another
        machine's, an older format) or its process still runs."""
        if not self.run or self.machine != machine_id() or self.pid is None:
            return ""
        if self.boot and self.boot != boot_id():
            return "this machine has booted since it was taken"
        start = process_start(self.pid)
        if not start:
            return f"pid {self.pid} no longer runs"
        if self.pidstart and start != self.pidstart:
            return f"pid {self.pid} is another process now"
        return ""


class Heartbeat:
    """While in it, renews the lease of every lock the run holds (held() names them) each HEARTBEAT_SECONDS:
    a live run's lock is never taken over. A run shorter than that sends none."""

    def __init__(self, owner: Owner, held: Callable[[], list[tuple[str, Connection]]], notice: Notice):
        self.owner, self.held, self.notice = owner, held, notice
        self.done = threading.Event()

    def __enter__(self) -> "Heartbeat":
        threading.Thread(target=self._beat, daemon=True, name="provision-heartbeat").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()

    def _beat(self) -> None:
        while not self.done.wait(HEARTBEAT_SECONDS):
            for host, conn in self.held():
                try:
                    outcome = conn.run(renew_argv(self.owner), timeout=30)
                except ProvisionError:  # a lost host: its lock goes stale on its own, for the next run
                    continue
                if not outcome.ok:
                    self.notice(f"{host}: the host lock is no longer this run's: {outcome.output}")


def take_message(output: str) -> tuple[str, str]:
    """The take script's first line as (what happened, the owner line it names): ("taken", ""),
    ("took over", LINE), ("took over (lease expired)", LINE) or ("held", LINE)."""
    first = output.strip().splitlines()[0] if output.strip() else "held: unknown"
    word, _, line = first.partition(": ")
    return word, line


class Taker:
    """Taking one host's lock in the facts batch (its first section), until it is this run's or the wait is
    over. A lock judged stale (its owner's process is gone, or its lease expired) is taken over with a notice;
    a live one is waited for, with one notice, until the wait is over or the run is stopped (stop: true once
    a signal asked the run to stop)."""

    TAKEN, AGAIN, STOPPED = "taken", "again", "stopped"

    def __init__(self, owner: Owner, host: str, wait: float, notice: Notice, inventory_path: str = "",
                 stop: Stop | None = None):
        self.owner, self.host, self.notice, self.inventory_path = owner, host, notice, inventory_path
        self.stop = stop
        self.deadline, self.waited, self.stale = time.monotonic() + wait, False, ""
        self.wait = wait
        self.took_over = False  # taken from a stale or expired holder

    @property
    def free(self) -> bool:
        """Taken at once: no other run held it while this one waited or took it."""
        return not (self.waited or self.took_over or self.stale)

    def argv(self) -> list[str]:
        return take_argv(self.owner, self.stale)

    def judge(self, held: Section) -> str:
        """TAKEN, AGAIN (read again: now, or after a second's wait), or why the lock cannot be had.
        held: the batch's "lock" section (rc, output)."""
        word, line = take_message(held.output)
        if word not in ("taken", "held") and not word.startswith("took over"):
            return f"cannot take the host lock: {held.output.strip() or f'exit {held.rc}'}"
        holder = Owner.parse(line)
        if held.rc == 0:
            self.took_over = word.startswith("took over")
            if word.startswith("took over"):
                why = ("its lease expired without a heartbeat" if "lease expired" in word
                       else holder.gone_here() if self.stale else "")
                self.notice(f"{self.host}: took over the host lock of {holder.said}" + (f" ({why})" if why else ""))
            return self.TAKEN
        if holder.gone_here() and line != self.stale:
            self.stale = line  # take it over at once: compare-and-swap on the host, against this exact line
            return self.AGAIN
        if self.stop:  # a signal while waiting: nothing was changed here; the run's stop says so
            return self.STOPPED
        if time.monotonic() >= self.deadline:
            return (f"another run holds the lock on this host ({holder.said}); if none is running, "
                    f"`provision unlock {self.inventory_path or 'INVENTORY'} --limit {self.host}` removes it")
        if not self.waited:
            self.notice(f"{self.host}: waiting up to {self.wait:g} s for the host lock, held by {holder.said}")
        self.waited = True
        time.sleep(1.0)
        return self.AGAIN


def unlock(conn: Connection, force: bool = False) -> tuple[str, str]:
    """`provision unlock` on one connected host: (no lock | removed | left alone, what was done, in words).
    A lock whose run still runs on this machine is left alone unless force."""
    held = conn.run(read_argv(), timeout=30)
    if held.stdout == "":
        return "no lock", ""
    line = held.stdout.strip()
    owner = Owner.parse(line)
    alive_here = owner.run and owner.machine == machine_id() and not owner.gone_here()
    if alive_here and not force:
        return "left alone", (f"held by a run still running on this machine ({owner.said}); stop that run, "
                              "or --force")
    removed = conn.run(remove_argv(line), timeout=30)
    if not removed.ok:
        return "left alone", f"it changed hands meanwhile: {removed.output.removeprefix('changed: ')}"
    return "removed", f"the lock of {owner.said}"


def unlock_hosts(hosts: list[Host], connect: Callable[[Host], Connection], force: bool,
                 forks: int) -> list[tuple[str, str, str]]:
    """unlock on every host, in parallel: (host, status, words); status "unreachable" too."""
    def one(host: Host) -> tuple[str, str, str]:
        conn = connect(host)
        try:
            conn.open()
            return (host.name, *unlock(conn, force))
        except Unreachable as exc:
            return host.name, "unreachable", str(exc)
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(hosts)))) as pool:
        return list(pool.map(one, hosts))

"""The BMC's share of the facts batch, for verify only: its event log (`ipmitool sel elist`), its power supply and
fan sensors (`ipmitool sdr type "Power Supply"`, `sdr type Fan`), and this node's record of the last good run.

How the BMC is reached (ipmitool needs root: as root, else through `sudo -n`):
- the open interface, /dev/ipmi0, where the kernel has one (modules ipmi_si and ipmi_devintf): a real server;
- else lanplus, as /etc/provision/bmc.conf on the node says: lines `host ADDR`, and optionally `port N`,
  `user NAME`, `password_file PATH` (ipmitool -f: the password is read from that file, never put on a
  command line, in the inventory or in a log) and `cipher_suite N` (ipmitool -C); the lab writes one for
  each node's simulated BMC (provision_lab/bmc.py);
- else there is no BMC here: the checks do not apply, and say why.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provision.capabilities.bmc import ipmi
from provision.core.facts import FactReader, FactSection, Section

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

CONF = "/etc/provision/bmc.conf"
IPMITOOL_SECONDS = 25  # each ipmitool call: a BMC that does not answer must not hold the batch (120 s in all)
DEVICES = ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0")  # where ipmitool's open interface looks
NO_BMC = (f"no {DEVICES[0]} (no BMC, or its kernel modules ipmi_si and ipmi_devintf are not loaded) "
          f"and no {CONF} naming a BMC to reach over the network")


def record_path() -> str:
    """This node's record of its BMC log at the last good run (PROVISION_BMC_SEL_RECORD moves it)."""
    return os.environ.get("PROVISION_BMC_SEL_RECORD", "/var/lib/provision/bmc-sel")


# As root, with $conf and $none set: how to reach the BMC. Sets "$@" to ipmitool's interface options and $via to
# words for it; where there is no BMC to reach, prints "none: why" and exits $absent (0 unless set).
ACCESS = r'''
if [ -e /dev/ipmi0 ] || [ -e /dev/ipmi/0 ] || [ -e /dev/ipmidev/0 ]; then
  set -- -I open; via="the open interface (/dev/ipmi0)"
elif [ -f "$conf" ]; then
  v() { sed -n "s/^[[:space:]]*$1[[:space:]][[:space:]]*//p" "$conf" | tail -n 1; }
  h=$(v host) p=$(v port) u=$(v user) f=$(v password_file) c=$(v cipher_suite)
  [ -n "$h" ] || { echo "none: $conf names no host"; exit "${absent:-0}"; }
  set -- -I lanplus -H "$h" ${p:+-p "$p"} ${u:+-U "$u"} ${f:+-f "$f"} ${c:+-C "$c"}
  via="lanplus $h${p:+ port $p} (as $conf says)"
else
  echo "none: $none"; exit "${absent:-0}"
fi
command -v ipmitool >/dev/null 2>&1 || { echo "none: ipmitool is not installed (apt install ipmitool)"; exit "${absent:-0}"; }
'''

# As root: $1 the conf, $2 the record, $3 seconds per ipmitool call, $4 the words for "no BMC". Prints the way in,
# the record, then each command's output framed by "@@NAME" and "@@rc N".
READ = r'''conf=$1 record=$2 t=$3 none=$4
''' + ACCESS + r'''
echo "via: $via"
echo @@record; cat "$record" 2>/dev/null
for what in sel psu fan; do
  echo "@@$what"
  case $what in
    sel) timeout "$t" ipmitool "$@" sel elist ;;
    psu) timeout "$t" ipmitool "$@" sdr type "Power Supply" ;;
    fan) timeout "$t" ipmitool "$@" sdr type Fan ;;
  esac 2>&1
  echo "@@rc $?"
done
'''


def snippet() -> str:
    """The section: nothing to ask for root where there is no BMC; else READ as root (sudo -n for another login)."""
    args = shlex.join([CONF, record_path(), str(IPMITOOL_SECONDS), NO_BMC])
    tests = " || ".join(f"[ -e {shlex.quote(p)} ]" for p in (*DEVICES, CONF))
    return (f"r={shlex.quote(READ)}; if ! {{ {tests}; }}; then echo {shlex.quote('none: ' + NO_BMC)}; "
            f"elif [ \"$(id -u)\" = 0 ]; then sh -c \"$r\" bmc {args}; "
            f"elif sudo -n true 2>/dev/null; then sudo -n sh -c \"$r\" bmc {args}; "
            "else echo 'unreadable: ipmitool needs root to reach the BMC: run verify as root or with NOPASSWD "
            "sudo'; fi")


# As root: $1 the conf, $2 the record, $3 seconds for ipmitool, $4 the words for "no BMC", $5 the record's header.
# Writes the log's newest entry as the record (atomically: a temp file, then a rename), or "empty"; fails with
# ipmitool's words where the BMC does not answer, and where there is none.
RECORD = r'''conf=$1 record=$2 t=$3 none=$4 header=$5 absent=1
''' + ACCESS + r'''
out=$(timeout "$t" ipmitool "$@" sel elist last 1 2>&1) || { printf '%s\n' "$out"; exit 1; }
entry=$(printf '%s\n' "$out" | grep -E '^[[:space:]]*[0-9a-fA-F]+[[:space:]]*[|]' | tail -n 1)
if [ -z "$entry" ]; then
  case $out in *"no entries"*) entry=empty ;; *) printf '%s\n' "$out"; exit 1 ;; esac
fi
mkdir -p "$(dirname "$record")"
printf '%s\n%s\n' "$header" "$entry" > "$record.tmp" && mv -f "$record.tmp" "$record"
echo "recorded, via $via: $entry"
'''


def record_argv() -> list[str]:
    """The command that records the BMC log's newest entry as the last good run's (run as root, by apply)."""
    return ["sh", "-c", RECORD, "provision-bmc-record", CONF, record_path(), str(IPMITOOL_SECONDS), NO_BMC,
            ipmi.RECORD_HEADER]


@dataclass
class BmcFacts:
    """The BMC as verify reads it. A command that could not be read is None, with ipmitool's words in errors."""

    via: str | None = None  # how it was reached: "the open interface (/dev/ipmi0)", "lanplus 127.0.0.1 ..."
    absent: bool = False  # no BMC here (message says why): the checks do not apply
    message: str = ""  # why it was not reached
    record: str | None = None  # the record of the last good run, as the node keeps it; None: none yet
    sel: list[ipmi.SelEntry] | None = None
    psus: list[ipmi.SdrSensor] | None = None
    fans: list[ipmi.SdrSensor] | None = None
    errors: dict[str, str] = field(default_factory=dict)  # "sel", "psu", "fan" -> why not read

    def unusable(self, what: str) -> str:
        """Why the answer of one command (sel, psu, fan) cannot be judged: "" when it can."""
        if self.via is None:
            return self.message or "the BMC was not read"
        return self.errors.get(what, "")


def parse_bmc(section: Section) -> BmcFacts:
    first, _, rest = section.output.partition("\n")
    kind, _, said = first.partition(": ")
    if kind == "none":
        return BmcFacts(absent=True, message=said)
    if kind != "via":
        return BmcFacts(message=said if kind == "unreadable" else
                        (section.output.strip() or f"the BMC's section exited {section.rc}"))
    facts = BmcFacts(via=said)
    parts: dict[str, list[str]] = {}
    codes: dict[str, int] = {}
    current = ""
    for line in rest.splitlines():
        if line in ("@@record", "@@sel", "@@psu", "@@fan"):
            current = line[2:]
            parts[current] = []
        elif line.startswith("@@rc ") and current:
            codes[current] = int(line[5:]) if line[5:].strip().isdigit() else 1
        elif current:
            parts[current].append(line)
    record = "\n".join(parts.get("record", [])).strip()
    facts.record = record or None
    for what in ("sel", "psu", "fan"):
        text = "\n".join(parts.get(what, []))
        code = codes.get(what)
        if code == 0:
            if what == "sel":
                facts.sel = ipmi.parse_sel(text)
            elif what == "psu":
                facts.psus = ipmi.parse_sdr(text)
            else:
                facts.fans = ipmi.parse_sdr(text)
        else:
            facts.errors[what] = _failure(code, text)
    return facts


def _failure(code: int | None, text: str) -> str:
    if code is None:
        return "not read (the batch ended before it)"
    if code == 124:
        return f"ipmitool had no answer from the BMC within {IPMITOOL_SECONDS} s"
    said = "; ".join(line.strip() for line in text.splitlines() if line.strip())[-300:]
    return f"ipmitool exited {code}" + (f": {said}" if said else "")


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "bmc" in sections:
        facts.bmc = parse_bmc(sections["bmc"])


VERIFY = frozenset({"verify"})  # apply has no use for them, and a slow BMC must not slow every run
READER = FactReader((FactSection("bmc", snippet, read_by=VERIFY),), parse)

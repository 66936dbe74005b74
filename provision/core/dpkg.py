"""What dpkg has installed, as one cheap command of the facts batch: its status database read by awk.

`dpkg-query -W` loads dpkg's whole database on every call (12 ms of CPU on a
development machine with 640 KB of status, more on a node with its CUDA
stack), and the facts batch asked it twice per read. The database is one
deb822 file, /var/lib/dpkg/status, the file apt itself parses; awk reads it
in a few ms. dpkg-query also folds in the journal of an interrupted dpkg run
(/var/lib/dpkg/updates/), which awk would not: while that journal holds an
entry, the snippet asks dpkg-query instead. Either way each line is

    PREFIXNAME VERSION ABBREV

for every package dpkg knows whose name matches a pattern (dpkg-query's shell globs, `*` only here).
ABBREV is db:Status-Abbrev, want then status ("ii" installed, "hi" installed and held, "rc" removed with its
configuration left); awk gives those two letters, the ones the parsers read. tests/unit/core/test_dpkg_status.py
compares both on real and made-up databases.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

ADMINDIR = "/var/lib/dpkg"
PATTERN = re.compile(r"^[a-z0-9][a-z0-9+.*-]*$")  # a package name (Debian policy 5.6.1), `*` for any run

# db:Status-Abbrev's letters for the Status field's first (want) and third (status) words.
WANT = {"unknown": "u", "install": "i", "hold": "h", "deinstall": "r", "purge": "p"}
STATE = {"not-installed": "n", "config-files": "c", "half-installed": "H", "unpacked": "U",
         "half-configured": "F", "triggers-awaited": "W", "triggers-pending": "t", "installed": "i"}

AWK = r'''BEGIN { split(WANTS, w, " "); for (i = 1; i in w; i += 2) want[w[i]] = w[i + 1]
               split(STATES, s, " "); for (i = 1; i in s; i += 2) state[s[i]] = s[i + 1] }
function emit() { if (p != "" && p ~ re && st != "") print prefix p " " v " " st; p = v = st = "" }
/^$/ { emit(); next }
/^Package: / { p = $2 }
/^Version: / { v = $2 }
/^Status: / { st = (($2 in want) ? want[$2] : "?") (($4 in state) ? state[$4] : "?") }
END { emit() }'''


def _regex(patterns: list[str]) -> str:
    # ERE without backslashes (awk -v would read them as escapes): "." and "+" as bracket expressions.
    words = [p.replace(".", "[.]").replace("+", "[+]").replace("*", ".*") for p in patterns]
    return "^(" + "|".join(words) + ")$"


def status_snippet(patterns: list[str], prefix: str = "", admindir: str = ADMINDIR) -> str:
    """One line per package dpkg knows that matches a pattern (see the module's docstring); prints nothing
    where there is no dpkg. Patterns that are not package names are asked of dpkg-query, quoted."""
    query = (f"dpkg-query --admindir={shlex.quote(admindir)} -W "
             f"--showformat={shlex.quote(prefix + '${Package} ${Version} ${db:Status-Abbrev}' + chr(10))} "
             f"{shlex.join(patterns)} 2>/dev/null")
    if not patterns or not all(PATTERN.match(p) for p in patterns):
        return query + "; true"
    awk = (f"awk -v re={shlex.quote(_regex(patterns))} -v prefix={shlex.quote(prefix)} "
           f"-v WANTS={shlex.quote(' '.join(f'{k} {v}' for k, v in WANT.items()))} "
           f"-v STATES={shlex.quote(' '.join(f'{k} {v}' for k, v in STATE.items()))} "
           f"{shlex.quote(AWK)} {shlex.quote(admindir + '/status')} 2>/dev/null")
    pending = f"for f in {shlex.quote(admindir + '/updates')}/[0-9]*; do [ -e \"$f\" ] && j=1; break; done"
    return f"j=; {pending}; if [ -n \"$j\" ]; then {query}; else {awk}; fi; true"


def installed(line: str) -> tuple[str, str, bool] | None:
    """One line of status_snippet, its prefix taken off: (name, version, held) for a package dpkg has installed
    ("ii", "hi"); None for one it knows otherwise (removed with its configuration left: "rc")."""
    words = line.split()
    if len(words) >= 3 and words[2][1:2] == "i":
        return words[0], words[1], words[2][0] == "h"
    return None


def installed_packages(lines: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Lines of status_snippet, their prefix taken off: the packages dpkg has installed, name -> version, and
    those of them held."""
    found = [package for line in lines if (package := installed(line))]
    return {name: version for name, version, _ in found}, [name for name, _, held in found if held]

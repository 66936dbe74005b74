"""DCGM as the host has it: its packages, and the versions `dcgmi -v` prints for itself and for the host engine it
reaches (none when nv-hostengine is not running).

`dcgmi -v` (also `--vv`; dcgmi/CommandLineParser.cpp in NVIDIA/DCGM) prints dcgmi's own build info, then, when it
reaches a host engine within 100 ms, the engine's, a "Name : value" line per field that has one (dcgmi/Version.cpp,
common/DcgmBuildInfo.cpp.in); newer releases head dcgmi's own with "Local build info:" (DCGM 4.7.0, NVIDIA/DCGM#314):

  Local build info:
  Version : 4.7.0
  Build ID : 24637
  ...

  Hostengine build info:
  Version : 4.7.0
  ...

It says nothing when no host engine answers (the command is silent about connecting). `dcgmi --version` is not that:
it is the command-line library's own line, dcgmi's version only (`dcgmi  version: 4.7.0`), read here too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from provision.core import dpkg
from provision.core.facts import FactReader, FactSection, Section

if TYPE_CHECKING:  # types only
    from provision.capabilities.host import HostFacts

DCGM_PACKAGES = "datacenter-gpu-manager*"  # 3.x: datacenter-gpu-manager; 4.x: datacenter-gpu-manager-4-*
HOSTENGINE_HEADING = "Hostengine build info:"
LOCAL_HEADING = "Local build info:"
VERSION_LINE = re.compile(r"^\s*(?:dcgmi\s+)?version\s*:\s*(\S+)", re.IGNORECASE)
BUILD_INFO_LINE = re.compile(r"^\s*[A-Za-z][A-Za-z ]* : ")  # "Build ID : 14" (an error says "Error: ...")

# "pkg NAME VERSION STATUS" per DCGM package dpkg knows (core/dpkg.py); where dcgmi is installed, "dcgmi LINE" per
# line of `dcgmi -v` (it waits at most 100 ms for the host engine).
DCGM_SNIPPET = (
    dpkg.status_snippet([DCGM_PACKAGES], "pkg ") + "; "
    "if command -v dcgmi >/dev/null 2>&1; then dcgmi -v 2>&1 | while IFS= read -r l; do echo \"dcgmi $l\"; "
    "done; fi; true"
)


@dataclass
class DcgmFacts:
    """DCGM on the host (capabilities/dcgm/facts.py)."""

    packages: dict[str, str] = field(default_factory=dict)  # installed DCGM packages -> Debian version
    held: list[str] = field(default_factory=list)  # of those, the ones on hold
    dcgmi: str | None = None  # dcgmi's own version; None: no dcgmi
    hostengine: str | None = None  # the version of the host engine dcgmi reached; None: none reached
    said: str = ""  # what dcgmi printed besides its versions' lines (an error reaching the host engine)


def parse_dcgm(text: str) -> DcgmFacts:
    found = DcgmFacts()
    engine, other, packages = False, [], []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "pkg":
            packages.append(rest)
        elif kind == "dcgmi":
            version = VERSION_LINE.match(rest)
            if rest.strip() == HOSTENGINE_HEADING:
                engine = True
            elif version and engine and found.hostengine is None:
                found.hostengine = version.group(1)
            elif version and not engine and found.dcgmi is None:
                found.dcgmi = version.group(1)
            elif rest.strip() and rest.strip() != LOCAL_HEADING and not BUILD_INFO_LINE.match(rest):
                other.append(rest.strip())
    found.said = "; ".join(other)
    found.packages, found.held = dpkg.installed_packages(packages)
    return found


def parse(sections: dict[str, Section], facts: HostFacts) -> None:
    if "dcgm" in sections:
        facts.dcgm = parse_dcgm(sections["dcgm"].output)


# DCGM's packages and the host engine's version: dcgmi waits up to 100 ms for a host engine that is not there, so
# the section is read again only after a change to DCGM (the driver's task alters everything: that one too).
READER = FactReader((FactSection("dcgm", DCGM_SNIPPET, refresh_on=frozenset({"dcgm"})),), parse)

"""What `dcgmi -v` and `dcgmi --version` really print, read by capabilities/dcgm/facts.py.

DCGM 4.7.0 on Ubuntu 22.04, verbatim (NVIDIA/DCGM#314, where DCGM's maintainer notes "`dcgmi -v` is not the same as
`dcgmi --version`"), the Build Platform line and the Commit ID cut short here. `-v` is dcgmi's own switch
(dcgmi/CommandLineParser.cpp: SwitchArg("v", "vv", "Get DCGMI version information")); `--version` is TCLAP's.
"""

from __future__ import annotations

from provision.capabilities.dcgm.facts import DCGM_SNIPPET, parse_dcgm

DCGMI_V_4_7 = """
Local build info:
Version : 4.7.0
Build ID : 24637
Build Date : 2026-09-09
Build Type : RelWithDebInfo
Commit ID : 63d151480cf5
Branch Name : v4.7.0
CPU Arch : x86_64
CRC : 209ebd9bbc4f1659ac404093f5f6f040

Hostengine build info:
Version : 4.7.0
Build ID : 24637
Build Date : 2026-09-09
Build Type : RelWithDebInfo
Commit ID : 63d151480cf5
Branch Name : v4.7.0
CPU Arch : x86_64
CRC : 209ebd9bbc4f1659ac404093f5f6f040
"""
DCGMI_VERSION_4_7 = "\ndcgmi  version: 4.7.0\n"


def section(text: str) -> str:
    return "".join(f"dcgmi {line}\n" for line in text.splitlines())


def test_dcgmi_v_gives_both_versions_and_nothing_else_said():
    found = parse_dcgm(section(DCGMI_V_4_7))
    assert (found.dcgmi, found.hostengine, found.said) == ("4.7.0", "4.7.0", "")


def test_without_a_host_engine_only_the_local_build_info():
    alone = DCGMI_V_4_7.split("\nHostengine build info:")[0]
    assert (parse_dcgm(section(alone)).hostengine, parse_dcgm(section(alone)).said) == (None, "")


def test_dcgmi_version_names_no_host_engine_so_the_section_asks_dash_v():
    assert (parse_dcgm(section(DCGMI_VERSION_4_7)).dcgmi, parse_dcgm(section(DCGMI_VERSION_4_7)).hostengine) == \
        ("4.7.0", None)
    assert "dcgmi -v " in DCGM_SNIPPET and "--version" not in DCGM_SNIPPET

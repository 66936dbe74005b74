"""verify's JUnit XML with one cause, one failure: pytest writes one test case per check and node, so a check that
fails only because of another finding (a lost GPU's count, its settings, its Xid) would be one more failure in CI.
Each such test case is marked skipped instead, its message naming the finding it follows from, and the cause's
own failure lists it ("Following from it: ..."), as verify's report and JSON file it under its cause
(verify.by_cause). A check with a cause of its own among its findings stays a failure."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from provision.verify import Cause, Failure, Verdict

CONSEQUENCE = "provision.consequence"  # the skipped element's type: a CI reader can tell it from a real skip


def case_name(check: str, host: str) -> str:
    """The test case pytest names for a check on a host: check_NAME[HOST], a task's check_as_intended[HOST-TASK]."""
    base, _, task = check.partition("[")
    return f"check_{base}[{host}-{task[:-1]}]" if task else f"check_{check}[{host}]"


def _said(failure: Failure) -> str:
    return f"{failure.check}: expected {failure.expected}, found {failure.found}"


def regroup(data: bytes, verdicts: list[Verdict]) -> bytes:
    """The XML pytest wrote, with each consequence under its cause (the module's docstring). XML that does not
    parse is left as it is: the file is pytest's, and an unreadable one is still what it wrote."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        return data
    follows: dict[str, Cause] = {}  # case name -> the cause it follows from, where all its findings follow one
    leads: dict[str, list[Failure]] = {}  # case name -> what follows from its findings
    for verdict in verdicts:
        causes = verdict.findings
        own = {case_name(c.failure.check, verdict.host) for c in causes}
        for cause in causes:
            leads.setdefault(case_name(cause.failure.check, verdict.host), []).extend(cause.consequences)
            for consequence in cause.consequences:
                name = case_name(consequence.check, verdict.host)
                if name not in own:
                    follows.setdefault(name, cause)
    for suite in root.iter("testsuite"):
        moved = 0
        for case in suite.iter("testcase"):
            name = case.get("name", "")
            failure = case.find("failure")
            if failure is None:
                continue
            if name in follows:
                case.remove(failure)
                ET.SubElement(case, "skipped", type=CONSEQUENCE,
                              message=f"follows from {_said(follows[name].failure)}")
                moved += 1
            elif leads.get(name):
                failure.text = (failure.text or "") + "\n\nFollowing from it (not failures of their own):\n" + \
                    "\n".join(f"- {_said(c)}" for c in leads[name])
        for count, change in (("failures", -moved), ("skipped", moved)):
            if suite.get(count) is not None:
                suite.set(count, str(int(suite.get(count) or 0) + change))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)

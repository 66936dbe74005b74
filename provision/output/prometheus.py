"""provision verify --prometheus FILE: the verdicts as node_exporter's textfile collector reads them.

Written with prometheus-client (its registry and text format), atomically (a temporary file beside FILE, then
a rename: the collector never reads half a file). The series (README, "Verify"):

    provision_verify_up{host}                         1 read and checked, 0 unreachable
    provision_verify_healthy{host}                    1 every check passed and all that was asked was tested
                                                      (0 for a node --active did not test: never healthy)
    provision_verify_not_tested{host,part}            1 for each part --active did not test (part: load, "ports
                                                      and all-reduce"); absent where it was tested
    provision_verify_measured{host,part,figure}       --active: what was measured (figure: its name with its
                                                      unit, power_peak_watts, power_headroom_watts, tflops,
                                                      sm_clock_median_mhz, port_mbps, allreduce_busbw_gbs, ...;
                                                      part: a GPU's bus id, a port, an all-reduce, "" the node)
    provision_verify_check_passed{host,check}         1 passed, 0 failed (checks that did not apply: absent)
    provision_verify_findings{host,severity}          the causes found, by severity (one cause, one finding)
    provision_verify_failure{host,check,gpu,part,severity,cause}
                                                      1 for each failed check and each GPU (gpu: its bus id) or
                                                      other part (part: an RDMA port "mlx5_0:1", a BMC sensor)
                                                      it names; both "" for a node-wide one; cause: the check
                                                      whose finding it follows from (its own name for a cause)
    provision_verify_last_run_timestamp_seconds       when this verify ran
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from provision.core import pci
from provision.core.checks import SEVERITIES
from provision.verify import PASS, UNREACHABLE, Verdict


def registry_for(verdicts: list[Verdict], now: float | None = None) -> CollectorRegistry:
    registry = CollectorRegistry()
    gauge = lambda name, doc, labels=(): Gauge(name, doc, labels, registry=registry)  # noqa: E731
    up = gauge("provision_verify_up", "1 when provision verify read and checked the host, 0 when unreachable",
               ["host"])
    healthy = gauge("provision_verify_healthy", "1 when every check passed on the host and all asked was tested",
                    ["host"])
    untested = gauge("provision_verify_not_tested", "1 for each part of verify --active that did not test the host",
                     ["host", "part"])
    measured = gauge("provision_verify_measured", "What verify --active measured (the unit in the figure's name)",
                     ["host", "part", "figure"])
    passed = gauge("provision_verify_check_passed", "1 when the check passed, 0 when it failed", ["host", "check"])
    findings = gauge("provision_verify_findings", "Causes found on the host (one cause, one finding), by severity",
                     ["host", "severity"])
    failure = gauge("provision_verify_failure", "1 for each failed check and each GPU (gpu: bus id) or other part "
                    "(part: a port, a sensor) it names", ["host", "check", "gpu", "part", "severity", "cause"])
    gauge("provision_verify_last_run_timestamp_seconds", "When provision verify ran (Unix time)").set(
        time.time() if now is None else now)
    for v in verdicts:
        up.labels(v.host).set(0 if v.status == UNREACHABLE else 1)
        if v.status == UNREACHABLE:
            continue
        healthy.labels(v.host).set(1 if v.status == PASS else 0)
        for part in dict.fromkeys(words.split(": ", 1)[0] for words in v.not_tested):
            untested.labels(v.host, part).set(1)
        for figure in v.figures:
            measured.labels(v.host, figure["part"], figure["figure"]).set(figure["value"])
        for check in v.passed:
            passed.labels(v.host, check).set(1)
        for check in dict.fromkeys(f.check for f in v.failures):
            passed.labels(v.host, check).set(0)
        causes = v.findings
        for severity in SEVERITIES:
            findings.labels(v.host, severity).set(sum(1 for c in causes if c.failure.severity == severity))
        for cause in causes:
            for f in (cause.failure, *cause.consequences):
                for subject in f.about or cause.failure.about or [""]:
                    gpu, part = (subject, "") if pci.address(subject) else ("", subject)
                    failure.labels(v.host, f.check, gpu, part, f.severity, cause.failure.check).set(1)
    return registry


def write(path: str, verdicts: list[Verdict]) -> None:
    """FILE atomically (prometheus-client writes a temporary file beside it and renames it over)."""
    write_to_textfile(path, registry_for(verdicts))

"""The program's entry point (provision/entry.py): the command's modules are imported with the cyclic garbage
collector off, and the command then runs with it on, what the imports made frozen out of its way."""

from __future__ import annotations

import subprocess
import sys

# Prints, as the interpreter exits (click ends the command with SystemExit), whether the collector is on and how
# many objects it leaves alone.
PROBE = ("import atexit, gc, sys\n"
         "atexit.register(lambda: print('collector', gc.isenabled(), gc.get_freeze_count()))\n"
         "sys.argv = ['provision', '--version']\n"
         "from provision.entry import main\n"
         "main()\n")


def test_the_command_runs_with_the_collector_on_and_its_imports_frozen():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    version, collector = done.stdout.splitlines()
    assert version == "provision, version 0.1.0"
    words = collector.split()
    assert words[:2] == ["collector", "True"]
    assert int(words[2]) > 10_000  # click, Fabric, pydantic, jinja2 and provision's own modules


def test_python_dash_m_provision_goes_through_the_same_entry():
    done = subprocess.run([sys.executable, "-m", "provision", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("Usage: provision [OPTIONS] COMMAND [ARGS]...")

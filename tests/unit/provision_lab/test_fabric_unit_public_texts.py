"""The fabric manager's unit, as provision reads it and the lab ships it, held to what public texts show of the real
one (its [Unit] file itself was not found verbatim):

- `systemctl status nvidia-fabricmanager` on a running HGX (bottlerocket-os/bottlerocket-kernel-kit#142):
  "● nvidia-fabricmanager.service - NVIDIA fabric manager service";
- its journal where it fails on Ubuntu 20.04 with NVIDIA's deb (NVIDIA/gpu-operator#610): "Starting NVIDIA fabric
  manager service..." then "nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE"
  (a control process: the real unit forks, Type=forking; the lab's stand-in does not fork and says Type=simple).
"""

from __future__ import annotations

import configparser

from provision.capabilities.fabric.facts import UNIT
from provision_lab import stack_fabric

STATUS = "● nvidia-fabricmanager.service - NVIDIA fabric manager service"
JOURNAL = "nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE"


def test_provision_and_the_lab_name_the_unit_as_systemd_shows_it():
    assert STATUS.split()[1] == UNIT == stack_fabric.UNIT
    assert JOURNAL.split(":")[0] == UNIT


def test_the_lab_unit_describes_itself_as_the_real_one():
    unit = configparser.ConfigParser(interpolation=None)
    unit.read_string(stack_fabric.UNIT_TEXT)
    assert unit["Unit"]["Description"] == STATUS.split(" - ", 1)[1]

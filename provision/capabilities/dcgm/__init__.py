"""DCGM with the driver (provision_driver.dcgm): its packages pinned and held for the driver's CUDA major, the host
engine (nvidia-dcgm) enabled and running the pinned version, for `dcgmi diag` and the exporter."""

from provision.capabilities.capability import Capability
from provision.capabilities.dcgm import facts, shown
from provision.capabilities.dcgm.tasks import Dcgm

CAPABILITY = Capability(name="dcgm", facts=facts.READER, tasks=(Dcgm,), checks=(f"{__name__}.checks",),
                        show=shown.lines)

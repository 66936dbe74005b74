"""NVIDIA Fabric Manager on NVSwitch boards (provision_driver.fabric_manager): its packages at the driver's exact
version, held, its service enabled and running, the GPUs registered with the fabric it sets up."""

from provision.capabilities.capability import Capability
from provision.capabilities.fabric import facts, packages, shown
from provision.capabilities.fabric.tasks import FabricManager

CAPABILITY = Capability(name="fabric", facts=facts.READER, tasks=(FabricManager,), checks=(f"{__name__}.checks",),
                        pending=(packages.reboot_pending,), show=shown.lines)

"""A node's health as verify reads it: the kernel log's GPU events, PCIe errors, the GPUs' temperature headroom."""

from provision.capabilities.capability import Capability
from provision.capabilities.health import facts

CAPABILITY = Capability(name="health", facts=facts.READER,
                        checks=(f"{__name__}.checks", f"{__name__}.checks_kernel",
                                f"{__name__}.checks_recovery"))

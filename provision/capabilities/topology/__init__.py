"""The topology: how the GPUs and NICs connect (nvidia-smi topo -m), and GPUDirect RDMA over it."""

from provision.capabilities.capability import Capability
from provision.capabilities.topology import facts, shown

CAPABILITY = Capability(name="topology", facts=facts.READER, checks=(f"{__name__}.checks",), show=shown.lines)

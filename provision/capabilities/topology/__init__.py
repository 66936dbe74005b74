"""The topology: how the GPUs and NICs connect (nvidia-smi topo -m), and GPUDirect RDMA over it (nvidia-peermem)."""

from provision.capabilities.capability import Capability
from provision.capabilities.topology import facts, peermem, shown
from provision.capabilities.topology.peermem import NvidiaPeermem

CAPABILITY = Capability(name="topology", facts=facts.READER, tasks=(NvidiaPeermem,), checks=(f"{__name__}.checks",),
                        show=shown.lines, reboot_refusals=(peermem.reboot_refusals,),
                        # nvidia_peermem loaded (a part of driver.peer_memory only the nvidia-peermem task plans from)
                        fact_keys=frozenset({"peermem"}))

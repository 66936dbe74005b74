"""NCCL: the interfaces and RDMA ports it will use, and the environment file that tells it so."""

from provision.capabilities.capability import Capability
from provision.capabilities.nccl import facts, shown
from provision.capabilities.nccl.settings import NcclSettings
from provision.capabilities.nccl.tasks import NcclFiles

CAPABILITY = Capability(
    name="nccl", settings=NcclSettings, facts=facts.READER, tasks=(NcclFiles,),
    checks=(f"{__name__}.checks", f"{__name__}.checks_rdma"), show=shown.lines,
    json_view=shown.view)

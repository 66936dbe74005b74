"""The BMC: its event log's power and cooling failures, its power supplies and fans (ipmitool)."""

from provision.capabilities.capability import Capability
from provision.capabilities.bmc import facts
from provision.capabilities.bmc.tasks import ACCEPT_BMC_EVENTS, BmcEventRecord

CAPABILITY = Capability(name="bmc", facts=facts.READER, tasks=(BmcEventRecord,), checks=(f"{__name__}.checks",),
                        run_flags=(ACCEPT_BMC_EVENTS,))

"""What every other capability builds on: files from templates, systemd units, apt, the CPUs, the daemons."""

from provision.capabilities.capability import Capability
from provision.capabilities.system import facts
from provision.capabilities.system.files import TemplateFile
from provision.capabilities.system.services import ServiceEnabled

CAPABILITY = Capability(
    name="system", facts=facts.READER, tasks=(TemplateFile, ServiceEnabled),
    # The enabled state of the units, which HostFacts.units holds as read and ServiceEnabled changes.
    fact_keys=frozenset({"units.enabled"}))

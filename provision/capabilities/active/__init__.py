"""Active acceptance (`provision verify --active`, issue 27): a node proven under load. sampler.py reads what
nvidia-smi samples during the load; judge.py says what those samples show."""

from provision.capabilities.active.settings import ActiveSettings
from provision.capabilities.capability import Capability

CAPABILITY = Capability(name="active", settings=ActiveSettings, checks=(f"{__name__}.checks",))

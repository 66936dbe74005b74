"""The launcher: torchrun's wrapper and environment for the training cluster a group forms."""

from provision.capabilities.capability import Capability
from provision.capabilities.launcher import rules
from provision.capabilities.launcher.settings import LauncherSettings
from provision.capabilities.launcher.tasks import TorchrunLauncher

CAPABILITY = Capability(name="launcher", settings=LauncherSettings, tasks=(TorchrunLauncher,), host_rules=rules.RULES,
                        host_refusals=(rules.group_is_one_word,), checks=(f"{__name__}.checks",))

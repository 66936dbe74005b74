"""Containers on the GPUs (provision_driver.container_toolkit): the NVIDIA Container Toolkit pinned with the driver,
the CDI spec of the loaded driver, docker and containerd (where installed) configured for the nvidia runtime."""

from provision.capabilities.capability import Capability
from provision.capabilities.containers import facts, shown
from provision.capabilities.containers.tasks import CdiSpec, ContainerRuntime, ContainerToolkit

CAPABILITY = Capability(name="containers", facts=facts.READER, tasks=(ContainerToolkit, CdiSpec, ContainerRuntime),
                        checks=(f"{__name__}.checks",), show=shown.lines)

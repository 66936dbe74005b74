"""The NVIDIA Container Toolkit with the driver (provision_driver.container_toolkit), in the order NVIDIA's install
guide gives: the toolkit's packages pinned and held, then the CDI spec generated for the loaded driver, then the
container engines installed here configured for the nvidia runtime and restarted.

The spec names the driver's libraries by version, so a driver change leaves it stale until it is generated again
("you currently need to regenerate the CDI specification on driver upgrades", NVIDIA/nvidia-container-toolkit#450).
The new driver loads at the reboot that follows its install: the cdi-spec task, run after that reboot (`apply
--reboot` runs the playbook on the rebooted host), generates it then. /var/run is emptied at every boot, so
there the spec is generated again after each one (the toolkit 1.18's nvidia-cdi-refresh does the same).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.capabilities.containers.facts import CDI_RUN, TOOLKIT_PACKAGES, CdiSpecFile, ContainersFacts
from provision.capabilities.driver.packages import reboot_reasons
from provision.capabilities.driver.pinned import Pin, plan_pinned
from provision.capabilities.driver.tasks import DriverTask
from provision.core.plan import OK, Change, Item, Plan

if TYPE_CHECKING:  # types only
    from provision.capabilities.driver.settings import DriverSettings
    from provision.capabilities.host import HostFacts
    from provision.inventory.model import Host

# The checks that report what these tasks would change (verify files as_intended's findings under them).
TOOLKIT_CHECK = "container_toolkit_is_the_pinned_version"
SPEC_CHECK = "cdi_spec_names_the_loaded_driver"
RUNTIME_CHECK = "container_engines_use_the_nvidia_runtime"
NO_CTK = "nvidia-ctk is not installed (the container-toolkit task installs it)"


def toolkit_pin(version: str) -> Pin:
    """The toolkit's four packages at one release, any Debian revision (NVIDIA's are "1.17.8-1")."""
    return Pin("container toolkit package", TOOLKIT_PACKAGES, version, f"{version}-*", cause=TOOLKIT_CHECK)


class ContainersTask(DriverTask):
    """A task of the toolkit: skipped where provision_driver.container_toolkit is not set."""

    tags = frozenset({"containers"})

    def not_wanted(self, wanted: DriverSettings) -> str:
        return "" if wanted.container_toolkit else "provision_driver.container_toolkit is not set"


class ContainerToolkit(ContainersTask):
    """Playbook: `task: container-toolkit`: nvidia-container-toolkit, -base, libnvidia-container-tools and
    libnvidia-container1 at provision_driver.container_toolkit, from one apt-get; held (provision_driver.hold)."""

    name = "container-toolkit"
    plans_from = frozenset({"packages", "held"})
    alters = frozenset({"packages", "held", "containers"})

    def package_names(self, host: Host) -> list[str]:
        wanted = host.settings.driver
        return list(TOOLKIT_PACKAGES) if wanted and wanted.container_toolkit else []

    def plan_driver(self, plan: Plan, wanted: DriverSettings, facts: HostFacts) -> None:
        assert wanted.container_toolkit is not None  # not_wanted() skipped the host otherwise
        plan_pinned(plan, wanted, toolkit_pin(wanted.container_toolkit), facts)


class CdiSpec(ContainersTask):
    """Playbook: `task: cdi-spec`: the CDI spec names the loaded driver's libraries: `nvidia-ctk cdi generate` into
    /var/run/cdi/nvidia.yaml where it is missing or names another driver, and into /etc/cdi/nvidia.yaml where a
    spec there names another (the engines read both)."""

    name = "cdi-spec"
    plans_from = frozenset({"containers.ctk", "containers.specs", "driver"})
    alters = frozenset({"containers.specs"})

    def plan_driver(self, plan: Plan, wanted: DriverSettings, facts: HostFacts) -> None:
        loaded, found = facts.driver.loaded, facts.containers
        if loaded is None:
            plan.skipped = "no NVIDIA module is loaded: the spec is generated once the driver loads (after the reboot)"
            return
        waits = reboot_reasons(wanted, facts)
        if waits:  # nvidia-ctk reads the driver through NVML, which fails until the reboot (library/driver mismatch)
            plan.skipped = f"the driver waits for a reboot ({waits[0]}): the spec is generated after it"
            return
        if not found.ctk:
            plan.failed, plan.failed_check = NO_CTK, TOOLKIT_CHECK
            return
        stale = dict(stale_specs(found, loaded))
        plan.unchanged += [Item(path, OK, "CDI spec", after=f"driver {loaded}") for path in found.specs if path not in stale]
        plan.changes += [Change(target=path, what="CDI spec", before=state, after=f"driver {loaded}",
                                commands=[["nvidia-ctk", "cdi", "generate", f"--output={path}"]], cause=SPEC_CHECK,
                                verify=lambda fresh, path=path: _not_generated(fresh, path))
                         for path, state in stale.items()]


def stale_specs(found: ContainersFacts, loaded: str) -> list[tuple[str, str]]:
    """The specs to generate for the loaded driver, with what each names now: each one there that names another
    driver (or none), and /var/run/cdi/nvidia.yaml where there is none at all."""
    stale = [(path, spec_state(spec)) for path, spec in sorted(found.specs.items()) if spec.drivers != [loaded]]
    return stale if found.specs else [(CDI_RUN, spec_state(None))]


def spec_state(spec: CdiSpecFile | None) -> str:
    """What a spec (None: absent) names, in words."""
    if spec is None:
        return "missing"
    return spec.problem or (f"driver {', '.join(spec.drivers)}" if spec.drivers else "names no driver library")


def _not_generated(facts: HostFacts, path: str) -> str | None:
    spec, loaded = facts.containers.specs.get(path), facts.driver.loaded
    return None if spec is not None and spec.drivers == [loaded] else f"{path}: {spec_state(spec)}, driver {loaded} loaded"


class ContainerRuntime(ContainersTask):
    """Playbook: `task: container-runtime`: docker and containerd, each where installed (provision installs no
    engine), configured for the nvidia runtime (`nvidia-ctk runtime configure --runtime=ENGINE`) and restarted."""

    name = "container-runtime"
    plans_from = frozenset({"containers.ctk", "containers.engines", "containers.runtime_problems", "system"})
    alters = frozenset({"containers.runtime_problems"})

    def plan_driver(self, plan: Plan, wanted: DriverSettings, facts: HostFacts) -> None:
        found = facts.containers
        if not found.engines:
            plan.skipped = "neither docker nor containerd is installed (provision installs no container engine)"
            return
        if not found.ctk:
            plan.failed, plan.failed_check = NO_CTK, TOOLKIT_CHECK
            return
        for engine in found.engines:
            problem = found.runtime_problems.get(engine, "")
            if not problem:
                plan.unchanged.append(Item(engine, OK, "nvidia runtime", after="configured"))
                continue
            restart = [["systemctl", "restart", engine]] if facts.system.systemd_running else []
            plan.changes.append(Change(
                target=engine, what="nvidia runtime", before=problem,
                after="configured" + (", restarted" if restart else ""), cause=RUNTIME_CHECK,
                commands=[["nvidia-ctk", "runtime", "configure", f"--runtime={engine}"], *restart],
                verify=lambda fresh, engine=engine: fresh.containers.runtime_problems.get(engine) or None))

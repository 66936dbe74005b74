"""Each capability declared once (capabilities/capability.py), in its folder's CAPABILITY; the registry folds them;
the shared layers name no capability. These keep CONTRIBUTING's promise: a new GPU setting with its check touches the
gpu folder, the playbooks and the simulator, nothing shared."""

from __future__ import annotations

import dataclasses
import importlib
import typing
from pathlib import Path

import grimp
import pytest

import provision.capabilities as capabilities
from provision.capabilities import gpu, registry
from provision.capabilities.capability import Capability
from provision.capabilities.fact_keys import field_paths, unknown_keys
from provision.capabilities.host import HostFacts, HostSettings
from provision.core.plan import Task

FOLDERS = sorted(p.name for p in Path(capabilities.__file__).parent.iterdir() if (p / "__init__.py").is_file())
# The modules of the capabilities' package that are not a capability: where they meet, and the form they take.
SHARED_MODULES = {"registry", "host", "capability", "fact_keys"}


def test_every_capability_folder_exports_its_declaration_and_the_registry_lists_each_once():
    declared = [importlib.import_module(f"provision.capabilities.{folder}").CAPABILITY for folder in FOLDERS]
    assert all(isinstance(c, Capability) for c in declared)
    assert [c.name for c in declared] == FOLDERS  # named for its folder
    assert sorted(c.name for c in registry.CAPABILITIES) == FOLDERS
    assert registry.declaration_problems() == []


def test_the_registry_names_are_folded_from_the_declarations():
    tasks = [t for c in registry.CAPABILITIES for t in c.tasks]
    assert list(registry.TASK_TYPES.values()) == tasks and len(set(registry.TASK_TYPES)) == len(tasks)
    assert registry.CHECKS == tuple(m for c in registry.CAPABILITIES for m in c.checks)
    assert registry.RUN_FLAGS == tuple(f for c in registry.CAPABILITIES for f in c.run_flags)
    assert registry.HOST_RULES == tuple(r for c in registry.CAPABILITIES for r in c.host_rules)
    assert list(registry.FACTS.readers[1:]) == [c.facts for c in registry.CAPABILITIES if c.facts]


def test_every_check_module_in_a_folder_is_declared_and_found():
    on_disk = {f"provision.capabilities.{p.parent.name}.{p.stem}"
               for p in Path(capabilities.__file__).parent.glob("*/checks*.py")}
    assert set(registry.CHECKS) == on_disk
    assert [f.stem for f in registry.check_files()] == [m.rsplit(".", 1)[1] for m in registry.CHECKS]


def test_each_settings_block_is_the_host_settings_field_named_for_its_capability():
    """HostSettings keeps a typed field per block (host.settings.gpu is a GpuSettings to mypy): the field and the
    declaration must not drift apart."""
    fields = typing.get_type_hints(HostSettings)
    for c in registry.CAPABILITIES:
        if c.settings is not None:
            assert fields[c.name] == c.settings | None, c.name


def test_run_flags_name_their_option_and_the_task_they_add():
    for flag in registry.RUN_FLAGS:
        assert flag.option == "--" + flag.name.replace("_", "-") and flag.help and flag.commands
        assert not flag.adds_task or flag.adds_task in registry.TASK_TYPES


def test_fact_keys_are_host_facts_paths_or_declared():
    assert {"nvidia.gpus", "bmc.record", "driver.loaded", "topology.matrix.gpus"} <= field_paths(HostFacts)
    assert "nvidia.gpus.power_limit" not in field_paths(HostFacts)  # not into lists: the tasks name columns
    keys = {key for task in registry.TASK_TYPES.values() for key in task.plans_from | task.alters}
    assert keys - {"*"} <= registry.FACT_KEYS
    assert unknown_keys(registry.TASK_TYPES.values(), registry.FACT_KEYS) == []


class _EccMode(Task):
    """A GPU task as a new setting would add it, with a fact key mistyped ("nvidia.gpu", not "nvidia.gpus")."""

    name = "gpu-ecc-mode"
    plans_from = frozenset({"nvidia.gpu", "driver"})
    alters = frozenset({"nvidia.ecc_mode"})


def test_a_mistyped_fact_key_fails_the_fold_naming_the_task_and_the_key():
    with_ecc = dataclasses.replace(gpu.CAPABILITY, tasks=(*gpu.CAPABILITY.tasks, _EccMode))
    folded = tuple(with_ecc if c is gpu.CAPABILITY else c for c in registry.CAPABILITIES)
    assert registry.declaration_problems(folded) == ["unknown fact key: gpu-ecc-mode plans_from 'nvidia.gpu'",
                                                     "unknown fact key: gpu-ecc-mode alters 'nvidia.ecc_mode'"]
    # Declared as the gpu capability's own key, the new column is known; the typo still is not.
    declared = dataclasses.replace(with_ecc, fact_keys=with_ecc.fact_keys | {"nvidia.ecc_mode"})
    folded = tuple(declared if c is gpu.CAPABILITY else c for c in registry.CAPABILITIES)
    assert registry.declaration_problems(folded) == ["unknown fact key: gpu-ecc-mode plans_from 'nvidia.gpu'"]


def test_a_capability_listed_twice_or_a_declared_key_that_is_a_field_is_refused():
    problems = registry.declaration_problems((*registry.CAPABILITIES, gpu.CAPABILITY))
    assert problems == ["capability 'gpu' is declared twice",
                        *(f"task type {name!r} is declared twice" for name in sorted(t.name for t in gpu.CAPABILITY.tasks)),
                        *(f"check module {m!r} is declared twice" for m in sorted(gpu.CAPABILITY.checks)),
                        "run flag 'accept_gpu_changes' is declared twice"]
    shadow = dataclasses.replace(gpu.CAPABILITY, fact_keys=gpu.CAPABILITY.fact_keys | {"nvidia.state"})
    assert registry.declaration_problems(tuple(shadow if c is gpu.CAPABILITY else c for c in registry.CAPABILITIES)) \
        == ["fact key 'nvidia.state' of gpu is a HostFacts field already"]


# The shared layers that may use a capability's own functions, and which: a command that is that capability's front
# end (clocks/power/persistence are the GPUs', drain and reboot ask Slurm, verify --active is active's, advise is
# NCCL's). Everything else reaches the capabilities through the registry, host.py and capability.py only.
COMMANDS_USING_A_CAPABILITY = {
    "provision.cli": {"nccl"},  # provision advise
    # verify --active runs torchrun on the NCCL links, over each training cluster (clusters)
    "provision.commands.active": {"active", "clusters", "launcher", "nccl"},
    "provision.commands.adhoc": {"gpu"},
    "provision.commands.demo": {"gpu"},  # where the simulated node's boot file is
    "provision.commands.drain": {"slurm"},
    "provision.commands.playbook": {"system"},  # a template's problems, before any host is read
    "provision.commands.reboot": {"slurm"},
    "provision.commands.slurm_reboot": {"slurm"},  # reboots handed to Slurm
    "provision.commands.slurm_rollout": {"slurm"},
    # recover drains and resumes in Slurm by provision's own reasons; its GPU reset stops what holds the GPUs
    # (DCGM, the fabric manager, persistenced) by their own names
    "provision.commands.recover": {"slurm"},
    "provision.commands.recovery": {"dcgm", "fabric", "gpu"},
    "provision.commands.verify": {"active"},
    "provision.commands.via_slurm": {"slurm"},
}
SHARED_LAYERS = ("core", "inventory", "verify", "output", "commands", "cli", "entry")


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("provision", exclude_type_checking_imports=True)


def capabilities_imported(graph, module: str) -> set[str]:
    """The capability folders a module imports (not registry, host or capability: where every one is folded)."""
    names = [imported.split(".") for imported in graph.find_modules_directly_imported_by(module)]
    return {n[2] for n in names if n[:2] == ["provision", "capabilities"] and len(n) > 2 and n[2] not in SHARED_MODULES}


def test_the_shared_layers_name_no_capability_but_a_command_its_own(graph):
    found = {}
    for module in sorted(graph.modules):
        if module.split(".")[1:2] and module.split(".")[1] in SHARED_LAYERS:
            used = capabilities_imported(graph, module)
            allowed = next((v for k, v in COMMANDS_USING_A_CAPABILITY.items()
                            if module == k or module.startswith(k + ".")), set())
            if used - allowed:
                found[module] = sorted(used - allowed)
    assert found == {}, "use the registry (a field of Capability), or say why in COMMANDS_USING_A_CAPABILITY"


def test_the_import_rule_sees_a_capability_imported_by_a_shared_module(graph):
    assert capabilities_imported(graph, "provision.commands.adhoc") == {"gpu"}
    assert capabilities_imported(graph, "provision.capabilities.registry") >= set(FOLDERS)

"""slurm.conf, gres.conf and cgroup.conf from the inventory and every node's facts (provision/capabilities/slurm/conf.py and the
templates): the lines as Slurm's real files write them, the whole-cluster rule, and every refusal."""

from __future__ import annotations

import re
import textwrap

import pytest
from realdata import capture

from provision.capabilities.slurm import conf as slurm
from provision.capabilities.system import cpu as cpu_facts
from provision.core import pci
from provision.capabilities.gpu.model import LostGpu, NvidiaFacts
from provision.capabilities.host import HostFacts
from provision.inventory.model import Inventory
from provision.inventory.load import load_inventory
from provision.capabilities.system.files import render
from paths import TEMPLATES

from builders.slurmnodes import V100_BUSES, head_facts, sys_text, v100_node

CLUSTER = """
all:
  vars:
    provision_slurm: {controller: head, cluster_name: basement}
  children:
    control:
      hosts:
        head: {ansible_host: 10.0.0.1}
    v100:
      hosts:
        v100-1: {ansible_host: 10.0.0.11}
        v100-2: {ansible_host: 10.0.0.12}
"""


@pytest.fixture
def inventory(tmp_path):
    def load(text: str) -> Inventory:
        path = tmp_path / "inventory.yaml"
        path.write_text(textwrap.dedent(text))
        return load_inventory(path)
    return load


def cluster_facts() -> dict[str, HostFacts]:
    return {"head": head_facts(), "v100-1": v100_node("v100-1"), "v100-2": v100_node("v100-2")}


def rendered(context: dict, template: str) -> str:
    return render(TEMPLATES, template, context)


def lines_starting(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def keys(line: str) -> list[str]:
    return [word.split("=", 1)[0] for word in line.split()]


# --- gres types from GPU names ---------------------------------------------------------------------

BRIEF_NAMES = {
    "Tesla V100-SXM2-16GB": "v100", "NVIDIA GeForce RTX 3090": "rtx3090", "NVIDIA GeForce RTX 4090": "rtx4090",
    "NVIDIA H100 80GB HBM3": "h100", "NVIDIA A100-SXM4-80GB": "a100", "Quadro RTX 8000": "rtx8000",
    "NVIDIA RTX A6000": "rtxa6000", "NVIDIA L40S": "l40s",
}
# Every name found in the real captures (below): a new capture with a new name must be added here.
REAL_NAMES = {
    "NVIDIA H100 80GB HBM3": "h100", "NVIDIA GeForce RTX 4090": "rtx4090", "Tesla V100-SXM2-32GB": "v100",
    "Tesla V100S-PCIE-32GB": "v100s", "NVIDIA GeForce RTX 3090": "rtx3090", "Tesla T4": "t4",
}


def real_gpu_names(real_output) -> set[str]:
    """The GPU names nvidia-smi printed in the real captures: -q's Product Name, -q -x's <product_name>,
    --query-gpu's name column, -L's "GPU 0: NAME (UUID: ...)"."""
    texts = [capture(name)[0] for name in ("smi-q.txt", "qgpu.txt", "list.txt")]
    texts += [real_output(name, optional=True) or "" for name in (
        "smi-q-full/rtx4090-geforce-windows-wddm.txt", "smi-q-full/v100-sxm2-32gb-traverse-gpu0.txt",
        "smi-q-full/rtx3090ti-rtx3090-4gpu-q-d-POWER.txt", "query-csv/v100s-pcie-32gb-timeseries-header.txt",
        "query-csv/a10-lms-timestamp-pstate-memory.txt", "supported-clocks/xml-rtx3090-geforce.txt",
        "supported-clocks/xml-tesla-t4.txt")]
    names = set()
    for text in texts:
        names.update(m.strip() for m in re.findall(r"^\s*Product Name\s*:\s*(.+)$", text, re.M))
        names.update(m.strip() for m in re.findall(r"<product_name>(.+?)</product_name>", text))
        names.update(m.strip() for m in re.findall(r"^GPU \d+: (.+?) \(UUID", text, re.M))
        lines = text.splitlines()
        for i, line in enumerate(lines):
            header = [cell.strip() for cell in line.split(",")]
            if "name" in header:
                column = header.index("name")
                names.update(row.split(",")[column].strip() for row in lines[i + 1:]
                             if row.count(",") >= column and not row.startswith("["))
    return names


def test_every_real_gpu_name_has_a_short_type(real_output):
    names = real_gpu_names(real_output)
    assert "NVIDIA H100 80GB HBM3" in names  # the repository's own capture, always there
    assert names <= set(REAL_NAMES), names - set(REAL_NAMES)
    for name in names:
        assert slurm.gpu_type(name) == REAL_NAMES[name], name
        # AutoDetect's Type must be part of the detected name (gres.conf(5), Type)
        assert slurm.autodetect_type(name) in slurm.detected_name(name)


@pytest.mark.parametrize("name,kind", [*BRIEF_NAMES.items(), ("NVIDIA GeForce RTX 3090 Ti", "rtx3090ti"),
                                       ("Tesla P100-PCIE-16GB", "p100"), ("NVIDIA A10", "a10"),
                                       ("NVIDIA RTX 6000 Ada Generation", "rtx6000ada"),
                                       ("GeForce GTX 1080 Ti", "gtx1080ti"), ("NVIDIA A100 80GB PCIe", "a100")])
def test_gpu_types(name, kind):
    assert slurm.gpu_type(name) == kind
    assert re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", kind)  # what provision_slurm.gpu_type accepts


def test_autodetect_types_are_part_of_the_name_slurmd_detects():
    assert slurm.detected_name("NVIDIA GeForce RTX 3090") == "nvidia_geforce_rtx_3090"
    assert slurm.autodetect_type("NVIDIA GeForce RTX 3090") == "rtx_3090"
    assert slurm.autodetect_type("NVIDIA RTX A6000") == "rtx_a6000"
    assert slurm.autodetect_type("Quadro RTX 8000") == "rtx_8000"
    assert slurm.autodetect_type("Tesla V100-SXM2-16GB") == "v100"  # in "tesla_v100-sxm2-16gb" already
    assert slurm.autodetect_type("NVIDIA H100 80GB HBM3") == "h100"


# --- slurm.conf ------------------------------------------------------------------------------------

def test_slurm_conf_for_one_controller_and_two_v100_nodes(inventory):
    inv = inventory(CLUSTER)
    context = slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), cluster_facts())
    text = rendered(context, "slurm.conf.j2")
    assert text.startswith("# slurm.conf of Slurm cluster basement: generated by provision from the whole inventory")
    assert "Do not edit" in text.splitlines()[1]
    assert lines_starting(text, "NodeName=") == [
        "NodeName=v100-1 NodeAddr=10.0.0.11 CPUs=80 Boards=1 SocketsPerBoard=2 CoresPerSocket=20 ThreadsPerCore=2 "
        "RealMemory=377866 Gres=gpu:v100:4 State=UNKNOWN",
        "NodeName=v100-2 NodeAddr=10.0.0.12 CPUs=80 Boards=1 SocketsPerBoard=2 CoresPerSocket=20 ThreadsPerCore=2 "
        "RealMemory=377866 Gres=gpu:v100:4 State=UNKNOWN"]
    # the controller by its short hostname (slurmctld compares `hostname -s`) and its inventory address
    assert lines_starting(text, "SlurmctldHost=") == ["SlurmctldHost=head(10.0.0.1)"]
    assert lines_starting(text, "PartitionName=") == [
        "PartitionName=v100 Nodes=v100-1,v100-2 Default=YES MaxTime=INFINITE State=UP"]
    settings = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith(("#", "Node",
                                                                                                      "Partition")))
    assert settings == {
        "ClusterName": "basement", "SlurmctldHost": "head(10.0.0.1)", "AuthType": "auth/munge", "SlurmUser": "slurm",
        "StateSaveLocation": "/var/lib/slurm/slurmctld", "SlurmdSpoolDir": "/var/lib/slurm/slurmd",
        "SlurmctldPidFile": "/run/slurmctld.pid", "SlurmdPidFile": "/run/slurmd.pid",
        "SlurmctldLogFile": "/var/log/slurm/slurmctld.log", "SlurmdLogFile": "/var/log/slurm/slurmd.log",
        "ProctrackType": "proctrack/cgroup", "TaskPlugin": "task/cgroup,task/affinity",
        "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core", "ReturnToService": "2",
        "RebootProgram": "/usr/sbin/reboot", "ResumeTimeout": "1800", "MpiDefault": "none", "GresTypes": "gpu"}


def test_node_and_partition_lines_have_the_shape_of_real_ones(inventory, real_output):
    """The real hpclab3 file's lines were written from slurmd -C: ours carry the same keys in the same order
    (plus NodeAddr, as in the real DGX-1 file)."""
    real = real_output("slurm/hpclab3-v100-sxm2-slurm.conf-nodes.txt")
    real_gpu_node = lines_starting(real, "NodeName=gpu01")[0]
    inv = inventory(CLUSTER)
    text = rendered(slurm.slurm_context(inv.hosts["v100-1"], inv.hosts.values(), cluster_facts()), "slurm.conf.j2")
    ours = lines_starting(text, "NodeName=")[0]
    assert [k for k in keys(ours) if k != "NodeAddr"] == keys(real_gpu_node)
    assert "NodeAddr" in keys(lines_starting(real_output("slurm/dgx1-cluster-slurm.conf-nodes.txt"), "NodeName=dgx")[0])
    assert keys(lines_starting(text, "PartitionName=")[0]) == keys(lines_starting(real, "PartitionName=")[0])
    assert lines_starting(real, "GresTypes=") == lines_starting(text, "GresTypes=")


def test_real_memory_stays_below_memtotal():
    assert slurm.real_memory(385578) == 377866  # floor(385578 * 0.98)
    for mib in (1, 1023, 24105, 385578, 2063750):
        assert slurm.real_memory(mib) <= mib  # never above what slurmd -C reports
    assert slurm.real_memory(1) == 1


def test_every_node_of_the_cluster_is_in_each_hosts_context(inventory):
    """The whole-inventory rule: a run limited to v100-2 still writes a slurm.conf naming v100-1; a second
    cluster (another controller) in the same inventory is not part of it."""
    inv = inventory(CLUSTER + """
    other:
      vars:
        provision_slurm: {controller: head2, cluster_name: other}
      hosts:
        head2: {ansible_host: 10.0.1.1}
        rtx-1: {ansible_host: 10.0.1.11}
""")
    facts = {**cluster_facts(), "head2": head_facts("head2"), "rtx-1": None}
    context = slurm.slurm_context(inv.hosts["v100-2"], inv.hosts.values(), facts)
    assert [n["name"] for n in context["nodes"]] == ["v100-1", "v100-2"]
    assert context["node_name"] == "v100-2" and context["controller"]["name"] == "head"
    same = slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts)
    assert rendered(same, "slurm.conf.j2") == rendered(context, "slurm.conf.j2")
    assert rendered(same, "gres.conf.j2") == rendered(context, "gres.conf.j2")
    assert same["node_name"] is None  # the controller runs no slurmd job steps of its own


def test_a_host_whose_facts_were_not_read_is_named(inventory):
    inv = inventory(CLUSTER.replace("v100-2: {ansible_host: 10.0.0.12}",
                                    "v100-2: {ansible_host: 10.0.0.12}\n        rtx3090-4: {ansible_host: 10.0.0.14}"))
    facts = {**cluster_facts(), "rtx3090-4": None}
    problems = slurm.slurm_context(inv.hosts["v100-1"], inv.hosts.values(), facts, unread={"rtx3090-4": "unreachable"})
    assert problems == ["slurm.conf needs every node's hardware: rtx3090-4 was not read (unreachable)"]
    del facts["rtx3090-4"]  # not even tried: still named
    assert slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts) == [
        "slurm.conf needs every node's hardware: rtx3090-4 was not read (its facts were not gathered)"]
    facts = {**cluster_facts(), "rtx3090-4": v100_node("rtx3090-4"), "head": None}
    assert slurm.slurm_context(inv.hosts["v100-1"], inv.hosts.values(), facts, unread={"head": "timed out"}) == [
        "slurm.conf needs the controller's hostname: head was not read (timed out)"]


def test_a_compute_node_without_cpu_facts_is_refused(inventory):
    inv = inventory(CLUSTER)
    facts = cluster_facts()
    facts["v100-2"].cpu = None
    assert slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts) == [
        "slurm.conf needs v100-2's CPUs and memory: CPU facts were not read"]
    facts["v100-2"].cpu = cpu_facts.parse_cpu("online 0-3\ncpu 0 - -\nmem -")
    problem, = slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts)
    assert problem.startswith("slurm.conf needs v100-2's CPUs and memory: no socket and core ids")
    assert "no MemTotal in /proc/meminfo" in problem
    facts = cluster_facts()
    facts["head"].cpu = None  # the controller-only host: no NodeName line, its CPUs are not needed
    assert isinstance(slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts), dict)


def test_gpus_the_node_cannot_show_are_refused(inventory):
    inv = inventory(CLUSTER)
    facts = cluster_facts()
    facts["v100-1"].nvidia = NvidiaFacts(state="missing", message="nvidia-smi is not installed (no NVIDIA driver)")
    assert slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts) == [
        "v100-1 has 4 NVIDIA GPU(s) on its PCI bus and no NVIDIA driver (nvidia-smi is not installed): "
        "slurm.conf would list it without GPUs"]
    facts = cluster_facts()
    facts["v100-1"].nvidia = NvidiaFacts(state="error", message="NVIDIA-SMI has failed")
    assert slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts) == [
        "v100-1: its GPUs could not be read (NVIDIA-SMI has failed): slurm.conf needs their number and model"]
    facts = cluster_facts()
    facts["v100-2"].nvidia.gpus.pop()
    facts["v100-2"].nvidia.lost = [LostGpu("0000:8a:00.0", "Unable to determine the device handle")]
    problem, = slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts)
    assert problem.startswith("v100-2: 0000:8a:00.0: Unable to determine")
    assert "count 3 GPU(s) where the node has 4" in problem


def test_a_cpu_only_node_has_no_gres_and_roles_decide_the_nodes(inventory):
    inv = inventory("""
        all:
          vars:
            provision_slurm: {controller: head}
          children:
            cpu:
              hosts:
                head: {ansible_host: 10.0.0.1, provision_slurm: {role: both}}
                cpu01: {ansible_host: 10.0.0.21}
            gpu:
              hosts:
                v100-1: {ansible_host: 10.0.0.11}
        """)
    facts = {"head": head_facts("head"), "cpu01": head_facts("cpu01"), "v100-1": v100_node("v100-1")}
    facts["cpu01"].nvidia = NvidiaFacts(state="missing")
    text = rendered(slurm.slurm_context(inv.hosts["cpu01"], inv.hosts.values(), facts), "slurm.conf.j2")
    assert lines_starting(text, "NodeName=") == [
        "NodeName=head NodeAddr=10.0.0.1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 "
        "RealMemory=31360 State=UNKNOWN",
        "NodeName=cpu01 NodeAddr=10.0.0.21 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 "
        "RealMemory=31360 State=UNKNOWN",
        "NodeName=v100-1 NodeAddr=10.0.0.11 CPUs=80 Boards=1 SocketsPerBoard=2 CoresPerSocket=20 ThreadsPerCore=2 "
        "RealMemory=377866 Gres=gpu:v100:4 State=UNKNOWN"]
    assert lines_starting(text, "PartitionName=") == [
        "PartitionName=cpu Nodes=head,cpu01 Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=gpu Nodes=v100-1 Default=NO MaxTime=INFINITE State=UP"]
    assert lines_starting(text, "ClusterName=") == ["ClusterName=cluster"]  # the setting's default


def test_a_node_mixing_models_lists_each_type(inventory):
    inv = inventory(CLUSTER)
    facts = cluster_facts()
    names = ["NVIDIA GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 3090",
             "NVIDIA GeForce RTX 3090"]
    for gpu, name in zip(facts["v100-1"].nvidia.gpus, names):
        gpu.name = name
    context = slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts)
    assert context["nodes"][0]["gres"] == "gpu:rtx3090ti:2,gpu:rtx3090:2"
    gres = rendered(context, "gres.conf.j2")
    assert lines_starting(gres, "NodeName=v100-1")[1:3] == [
        "NodeName=v100-1 Name=gpu Type=rtx3090ti File=/dev/nvidia1 Cores=0-19",
        "NodeName=v100-1 Name=gpu Type=rtx3090 File=/dev/nvidia2 Cores=20-39"]


def test_gpu_type_setting_overrides_the_name(inventory):
    inv = inventory(CLUSTER.replace("v100-1: {ansible_host: 10.0.0.11}",
                                    "v100-1: {ansible_host: 10.0.0.11, provision_slurm: {gpu_type: tesla}}"))
    context = slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), cluster_facts())
    assert [n["gres"] for n in context["nodes"]] == ["gpu:tesla:4", "gpu:v100:4"]


def test_cluster_wide_settings_must_agree(inventory):
    inv = inventory(CLUSTER.replace("v100-2: {ansible_host: 10.0.0.12}",
                                    "v100-2: {ansible_host: 10.0.0.12, provision_slurm: {cluster_name: attic}}"))
    assert slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), cluster_facts()) == [
        "provision_slurm.cluster_name must be the same on every host of the Slurm cluster (slurm.conf is one file): "
        "head, v100-1 say 'basement'; v100-2 says 'attic'"]


def test_two_hosts_with_one_hostname_are_refused(inventory):
    inv = inventory(CLUSTER)
    facts = {**cluster_facts(), "v100-2": v100_node("v100-1.basement.example")}
    assert slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts) == [
        "v100-1 and v100-2 both have the hostname v100-1: each Slurm node needs its own"]


def test_a_second_controller_role_is_refused(inventory):
    inv = inventory(CLUSTER.replace("v100-2: {ansible_host: 10.0.0.12}",
                                    "v100-2: {ansible_host: 10.0.0.12, provision_slurm: {role: both}}"))
    assert slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), cluster_facts()) == [
        "v100-2 has provision_slurm.role both but the cluster's controller is head: one slurmctld per cluster"]


# --- gres.conf -------------------------------------------------------------------------------------

def test_gres_conf_lists_each_gpu_with_its_device_and_the_cores_of_its_socket(inventory, real_output):
    inv = inventory(CLUSTER)
    gres = rendered(slurm.slurm_context(inv.hosts["v100-2"], inv.hosts.values(), cluster_facts()), "gres.conf.j2")
    assert gres.startswith("# gres.conf of Slurm cluster basement: generated by provision from the whole inventory")
    lines = [line for line in gres.splitlines() if not line.startswith("#")]
    assert lines == [f"NodeName={node} Name=gpu Type=v100 File=/dev/nvidia{i} Cores={'0-19' if i < 2 else '20-39'}"
                     for node in ("v100-1", "v100-2") for i in range(4)]
    real = lines_starting(real_output("slurm/hpclab3-v100-sxm2-gres.conf.txt"), "NodeName=")[0]
    assert keys(lines[0])[:4] == keys(real)  # NodeName Name Type File, then our Cores


def test_device_files_follow_the_drivers_minor_numbers(inventory):
    inv = inventory(CLUSTER)
    facts = {**cluster_facts(), "v100-1": v100_node("v100-1", minors=[1, 0, 3, 2])}
    gres = rendered(slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts), "gres.conf.j2")
    assert lines_starting(gres, "NodeName=v100-1") == [  # in File= order (gres.conf(5)); GPU 1 is /dev/nvidia0
        "NodeName=v100-1 Name=gpu Type=v100 File=/dev/nvidia0 Cores=0-19",
        "NodeName=v100-1 Name=gpu Type=v100 File=/dev/nvidia1 Cores=0-19",
        "NodeName=v100-1 Name=gpu Type=v100 File=/dev/nvidia2 Cores=20-39",
        "NodeName=v100-1 Name=gpu Type=v100 File=/dev/nvidia3 Cores=20-39"]
    no_minors = v100_node("v100-1")
    no_minors.cpu.gpu_minors.clear()  # driver's /proc entry not readable: the nvidia-smi index
    no_minors.nvidia.gpus[0].index, no_minors.nvidia.gpus[1].index = 1, 0
    facts["v100-1"] = no_minors
    context = slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts)
    assert [g["file"] for g in context["gres_nodes"][0]["gpus"]] == [f"/dev/nvidia{i}" for i in range(4)]


def test_cores_are_left_out_where_unknown_or_where_every_core_is_as_close(inventory):
    inv = inventory(CLUSTER)
    facts = cluster_facts()
    facts["v100-1"].cpu.gpu_cpulists["0000:1a:00.0"] = None  # local_cpulist not readable
    on_pci = [(pci.address(bus), "0-15", i) for i, bus in enumerate(V100_BUSES)]
    one_socket = cpu_facts.parse_cpu(sys_text(1, 16, 1, 131900000, "cgroup2fs", on_pci))
    facts["v100-2"].cpu = one_socket
    gres = rendered(slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts), "gres.conf.j2")
    assert lines_starting(gres, "NodeName=v100-1")[:2] == [
        "NodeName=v100-1 Name=gpu Type=v100 File=/dev/nvidia0",
        "NodeName=v100-1 Name=gpu Type=v100 File=/dev/nvidia1 Cores=0-19"]
    assert lines_starting(gres, "NodeName=v100-2") == [
        f"NodeName=v100-2 Name=gpu Type=v100 File=/dev/nvidia{i}" for i in range(4)]


def test_autodetect_writes_the_types_and_counts_without_files(inventory):
    inv = inventory(CLUSTER.replace("cluster_name: basement}", "cluster_name: basement, gres_autodetect: nvml}"))
    facts = cluster_facts()
    for gpu in facts["v100-2"].nvidia.gpus:
        gpu.name = "NVIDIA GeForce RTX 3090"
    context = slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), facts)
    gres = rendered(context, "gres.conf.j2")
    assert [line for line in gres.splitlines() if not line.startswith("#")] == [
        "AutoDetect=nvml",
        "NodeName=v100-1 Name=gpu Type=v100 Count=4",
        "NodeName=v100-2 Name=gpu Type=rtx_3090 Count=4"]  # a substring of nvidia_geforce_rtx_3090
    assert [n["gres"] for n in context["nodes"]] == ["gpu:v100:4", "gpu:rtx_3090:4"]
    assert "24.11" not in gres


def test_autodetect_per_node_where_nodes_differ(inventory):
    inv = inventory(CLUSTER.replace("v100-2: {ansible_host: 10.0.0.12}",
                                    "v100-2: {ansible_host: 10.0.0.12, provision_slurm: {gres_autodetect: nvidia}}"))
    gres = rendered(slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), cluster_facts()), "gres.conf.j2")
    assert "# AutoDetect=nvidia needs Slurm 24.11 or newer (22.05 knows nvml, rsmi and off)." in gres
    assert [line for line in gres.splitlines() if not line.startswith("#")] == [
        *[f"NodeName=v100-1 Name=gpu Type=v100 File=/dev/nvidia{i} Cores={'0-19' if i < 2 else '20-39'}"
          for i in range(4)],
        "NodeName=v100-2 AutoDetect=nvidia",
        "NodeName=v100-2 Name=gpu Type=v100 Count=4"]


def test_a_gpu_type_autodetect_cannot_match_is_refused(inventory):
    inv = inventory(CLUSTER.replace("cluster_name: basement}",
                                    "cluster_name: basement, gres_autodetect: nvml, gpu_type: volta}"))
    problems = slurm.slurm_context(inv.hosts["head"], inv.hosts.values(), cluster_facts())
    assert len(problems) == 8  # each GPU of both nodes
    assert problems[0] == ("v100-1: provision_slurm.gpu_type 'volta' is not part of the name AutoDetect=nvml gives GPU0 "
                           "(tesla_v100-sxm2-16gb): slurmd would not match them (gres.conf(5), Type); use e.g. 'v100'")


# --- cgroup.conf -----------------------------------------------------------------------------------

def test_cgroup_conf_follows_each_hosts_own_cgroup_layout(inventory):
    inv = inventory(CLUSTER)
    facts = {**cluster_facts(), "v100-2": v100_node("v100-2", cgroup="tmpfs")}
    facts["head"].cpu.cgroup = None

    def cgroup_conf(host: str) -> list[str]:
        text = rendered(slurm.slurm_context(inv.hosts[host], inv.hosts.values(), facts), "cgroup.conf.j2")
        return [line for line in text.splitlines() if not line.startswith("#")]

    assert cgroup_conf("v100-1") == ["CgroupPlugin=cgroup/v2", "ConstrainCores=yes", "ConstrainDevices=yes",
                                     "ConstrainRAMSpace=yes"]
    assert cgroup_conf("v100-2")[0] == "CgroupPlugin=cgroup/v1"
    assert cgroup_conf("head")[0] == "CgroupPlugin=autodetect"


def test_the_health_check_is_in_slurm_conf_and_on_each_compute_node(inventory):
    import subprocess

    from provision.core.cluster import Cluster
    from provision.capabilities.slurm.tasks import HEALTH_CHECK, SlurmConfig

    inv = inventory(CLUSTER.replace("cluster_name: basement}", "cluster_name: basement, health_check_interval: 120, "
                                    "provision_command: /opt/provision/bin/provision}"))
    task = SlurmConfig()
    task.templates = TEMPLATES
    task.cluster = Cluster(list(inv.hosts.values()), cluster_facts())
    written = {c.write.path: c.write for c in task.plan(inv.hosts["v100-1"], cluster_facts()["v100-1"]).changes}
    assert lines_starting(written["/etc/slurm/slurm.conf"].content, "HealthCheck") == [
        f"HealthCheckProgram={HEALTH_CHECK}", "HealthCheckInterval=120", "HealthCheckNodeState=ANY"]
    script = written[HEALTH_CHECK]
    assert script.mode == "0755" and subprocess.run(["sh", "-n"], input=script.content, text=True).returncode == 0
    assert ("/opt/provision/bin/provision verify /etc/provision/inventory.yaml --local --limit=v100-1 --drain "
            "--resume --json") in script.content.replace("\\\n    ", "")
    head = {c.write.path for c in task.plan(inv.hosts["head"], cluster_facts()["head"]).changes}
    assert HEALTH_CHECK not in head  # slurmd runs it; the controller-only host has none

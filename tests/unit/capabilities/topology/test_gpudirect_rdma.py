"""GPUDirect RDMA where NCCL would use it (capabilities/topology/gdr.py, the check in topology/checks.py): the files the
driver's batch reads, the GPU-NIC pairs NCCL_NET_GDR_LEVEL takes, and the verdict with a peer-memory module,
with DMA-BUF, and with neither."""

from __future__ import annotations

import subprocess


from builders.facts import facts
from builders.hosts import host
from provision.capabilities.driver.facts import DRIVER_SNIPPET, PEER_MEMORY, DriverFacts, parse_driver
from provision.capabilities.topology import gdr
from provision.capabilities.topology.checks import check_gpudirect_rdma_is_available_where_nccl_uses_it as CHECK
from provision.capabilities.topology.topo import TopologyFacts, parse_topo
from provision.core.checks import WARNING
from provision.verify import Node

from builders.checks import verdict

# An 8-GPU box's pattern, cut to two GPUs: GPU0 and mlx5_0 behind one PCIe switch, GPU1 and mlx5_1 behind another
# on the other socket.
TOPO = """\
\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tSYS\tPIX\tSYS\t0-15\t0\t\tN/A
GPU1\tSYS\t X \tSYS\tPXB\t16-31\t1\t\tN/A
NIC0\tPIX\tSYS\t X \tSYS\t\t\t\t
NIC1\tSYS\tPXB\tSYS\t X \t\t\t\t

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.195.03  Release Build"
OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build  (dvs-builder@U16)"


def test_the_batch_says_which_peer_memory_files_are_there_and_the_kernel(tmp_path):
    module = tmp_path / "nvidia_peermem"
    module.mkdir()
    (module / "version").write_text("570.195.03\n")
    snippet = DRIVER_SNIPPET.replace(PEER_MEMORY[0], str(module / "version"))
    out = subprocess.run(["sh", "-c", snippet], capture_output=True, text=True, timeout=30)
    found = parse_driver(out.stdout.replace(str(module / "version"), PEER_MEMORY[0]))
    assert found.peer_memory == ["/sys/module/nvidia_peermem/version"] and out.stderr == ""
    assert found.kernel and found.kernel[0].isdigit()
    assert parse_driver("kernel 6.1.0-27-amd64\npeermem /sys/kernel/mm/memory_peers/nv_mem/version\n") == \
        DriverFacts(kernel="6.1.0-27-amd64", peer_memory=["/sys/kernel/mm/memory_peers/nv_mem/version"])


def test_the_pairs_within_the_gdr_level_and_the_kernel_versions():
    matrix = parse_topo(TOPO)
    assert gdr.near_pairs(matrix, None, "PXB") == [("GPU0", "mlx5_0", "PIX"), ("GPU1", "mlx5_1", "PXB")]
    assert gdr.near_pairs(matrix, None, "PIX") == [("GPU0", "mlx5_0", "PIX")]
    assert gdr.near_pairs(matrix, {"mlx5_1"}, "PXB") == [("GPU1", "mlx5_1", "PXB")]
    assert [gdr.kernel_at_least(k, (5, 12)) for k in ("5.11.0-1", "5.12.0", "6.1.0-27-amd64", "")] == \
        [False, True, True, None]


def node(driver: DriverFacts, topo: str | None = TOPO, **nccl) -> Node:
    read = facts(driver=driver, topology=TopologyFacts(matrix=parse_topo(topo)) if topo else None)
    return Node("hgx-1", host("hgx-1", provision_nccl=nccl or None), read, [], host=None, inventory_path="cluster.yaml")


def test_a_peer_memory_module_or_dma_buf_passes_and_neither_is_one_warning_with_the_modprobe():
    loaded = DriverFacts(loaded="570.195.03", loaded_line=PROPRIETARY, loaded_open=False, kernel="6.1.0-27-amd64",
                         peer_memory=["/sys/module/nvidia_peermem/version"])
    assert verdict(CHECK, node(loaded)) is None
    assert verdict(CHECK, node(DriverFacts(loaded="570.195.03", loaded_open=True, kernel="6.8.0-45-generic"))) is None
    failed = verdict(CHECK, node(DriverFacts(loaded="570.195.03", loaded_open=False, kernel="6.8.0-45-generic")))
    [finding] = failed.findings
    assert finding.severity == WARNING
    assert "GPU0-mlx5_0 PIX, GPU1-mlx5_1 PXB" in finding.expected and "NCCL's default GDR level, PXB" in \
        finding.expected
    assert finding.found == ("no peer-memory module loaded (/sys/module/nvidia_peermem/version absent) and the "
                             "proprietary kernel module has no DMA-BUF for it")
    assert finding.fix.startswith("`modprobe nvidia-peermem` on the node") and "modules-load.d" in finding.fix
    old_kernel = verdict(CHECK, node(DriverFacts(loaded="570.195.03", loaded_open=True, kernel="5.4.0-150-generic")))
    assert "kernel 5.4.0-150-generic has no DMA-BUF for it" in old_kernel.findings[0].found


def test_where_nccl_would_not_use_gpudirect_rdma_the_check_says_why():
    bare = DriverFacts(loaded="570.195.03", loaded_open=False, kernel="6.1.0")
    assert verdict(CHECK, node(bare, ib_disable=True)).startswith("skip: not applicable: provision_nccl.ib_disable")
    assert verdict(CHECK, node(bare, net_gdr_level="LOC")) == \
        "skip: not applicable: provision_nccl.net_gdr_level LOC turns GPUDirect RDMA off"
    assert verdict(CHECK, node(bare, topo=None)) == "skip: the topology was not read (nvidia-smi topo -m)"
    far = TOPO.replace("PIX", "SYS").replace("PXB", "SYS")  # every NIC across the sockets
    assert verdict(CHECK, node(bare, topo=far)).startswith(
        "skip: not applicable: no GPU has an RDMA NIC NCCL may use at PXB")
    only_pix = verdict(CHECK, node(bare, net_gdr_level="PIX"))
    assert "NCCL_NET_GDR_LEVEL=PIX: GPU0-mlx5_0 PIX)" in only_pix.findings[0].expected

"""nvidia-peermem where the driver block wants it (capabilities/topology/peermem.py): auto, true and false; the
apply task's file and modprobe, a module a reboot away; GPUDirect RDMA's check leaving alone what is pending or
switched off, and as_intended filing the missing module under that check (one finding)."""

from __future__ import annotations

from builders.checks import checked_node, verdict
from builders.facts import file, facts
from builders.hosts import host
from provision.capabilities import registry
from provision.capabilities.driver.facts import DriverFacts
from provision.capabilities.driver.nextboot import NextBoot
from provision.capabilities.host import HostFacts
from provision.capabilities.topology import peermem
from provision.capabilities.topology.checks import check_gpudirect_rdma_is_available_where_nccl_uses_it as GDR
from provision.capabilities.topology.checks import check_the_next_boot_kernel_has_nvidia_peermem_where_wanted as \
    NEXT_PEERMEM
from provision.capabilities.topology.peermem import MODULES_LOAD, MODULES_LOAD_TEXT, NvidiaPeermem
from provision.capabilities.topology.topo import Topology, TopologyFacts
from provision.verify.as_intended import check_as_intended

DRIVER = "580.159.04"
# GPU0 and mlx5_0 behind one PCIe switch: NCCL's default GDR level (PXB) takes the pair.
NEAR = Topology(gpus=["GPU0"], nics={"NIC0": "mlx5_0"}, links={("GPU0", "NIC0"): "PIX", ("NIC0", "GPU0"): "PIX"})
LOADED = "/sys/module/nvidia_peermem/version"
NEXT = "6.8.0-100-generic"


def read(*, peer: bool = False, installed: str = DRIVER, loaded: str | None = DRIVER, open_modules: bool = False,
         conf: str | None = MODULES_LOAD_TEXT, topology: Topology | None = NEAR) -> HostFacts:
    driver = DriverFacts(loaded=loaded, loaded_open=open_modules, kernel="6.8.0-45-generic",
                         packages={"nvidia-driver-580": f"{installed}-1"}, peer_memory=[LOADED] if peer else [])
    return facts(driver=driver, topology=TopologyFacts(matrix=topology),
                 files={MODULES_LOAD: file(MODULES_LOAD, conf)}, packages={"nvidia-driver-580": f"{installed}-1"})


def blocks(peermem_setting: object = "auto", **nccl: object) -> dict[str, object]:
    return {"provision_driver": {"version": DRIVER, "packages": ["nvidia-driver-{branch}"], "peermem": peermem_setting},
            "provision_nccl": nccl or None}


def test_auto_wants_it_where_nccl_would_use_gpudirect_rdma_without_dma_buf():
    assert peermem.wanted(host("hgx-1", **blocks()), read()) == \
        (True, "provision_driver.peermem auto: NCCL would use GPUDirect RDMA (NCCL's default GDR level, PXB)")
    assert peermem.wanted(host("hgx-1", **blocks(ib_disable=True)), read()) == \
        (False, "provision_driver.peermem auto: not applicable: provision_nccl.ib_disable is set (NCCL uses no RDMA "
                "port)")
    far = Topology(gpus=["GPU0"], nics={"NIC0": "mlx5_0"}, links={("GPU0", "NIC0"): "SYS", ("NIC0", "GPU0"): "SYS"})
    assert not peermem.wanted(host("hgx-1", **blocks()), read(topology=far))[0]
    want, why = peermem.wanted(host("hgx-1", **blocks()), read(open_modules=True))
    assert not want and "DMA-BUF" in why


def test_true_wants_it_everywhere_and_false_leaves_it_alone():
    assert peermem.wanted(host("pcie-1", **blocks(True)), read(topology=None)) == \
        (True, "provision_driver.peermem is true")
    assert peermem.wanted(host("hgx-1", **blocks(False)), read()) == \
        (False, "provision_driver.peermem is false: left alone")
    assert NvidiaPeermem().file_paths(host("hgx-1", **blocks(False))) == []
    assert NvidiaPeermem().fact_sections(host("hgx-1", **blocks())) == ["topo"]


def test_apply_writes_modules_load_d_and_loads_the_module_now():
    plan = NvidiaPeermem().plan(host("hgx-1", **blocks()), read(conf=None))
    write, load = plan.changes
    assert write.target == MODULES_LOAD and write.write is not None and write.write.content == MODULES_LOAD_TEXT
    assert (load.target, load.before, load.after, load.commands) == \
        ("nvidia_peermem", "not loaded", "loaded", [["modprobe", "nvidia-peermem"]])
    assert load.cause == "gpudirect_rdma_is_available_where_nccl_uses_it"  # where auto wants it: that check's finding
    assert load.verify(read()) == f"modprobe nvidia-peermem ran, and {LOADED} is not there"
    assert load.verify(read(peer=True)) is None
    assert "MLNX_OFED" in load.explain("modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument")
    assert NvidiaPeermem().plan(host("pcie-1", **blocks(True)), read(conf=None)).changes[1].cause == ""


def test_loaded_is_unchanged_and_a_driver_a_reboot_away_is_pending():
    done = NvidiaPeermem().plan(host("hgx-1", **blocks()), read(peer=True))
    assert not done.changes and [(i.target, i.after) for i in done.unchanged][-1] == ("nvidia_peermem", "loaded")
    later = NvidiaPeermem().plan(host("hgx-1", **blocks()), read(installed="580.200.01"))
    assert not later.changes
    [item] = [i for i in later.unchanged if i.target == "nvidia_peermem"]
    assert item.after == "pending" and item.message.startswith(
        "nvidia_peermem loads with the installed driver at the next boot (driver 580.200.01 is installed, 580.159.04 "
        "is loaded")
    skipped = NvidiaPeermem().plan(host("hgx-1", **blocks(False)), read())
    assert skipped.skipped == "provision_driver.peermem is false: left alone"


def test_unloaded_where_wanted_is_one_finding_gdr_check_and_as_intended_filed_under_it():
    node = checked_node(read(), "hgx-1", tasks=[NvidiaPeermem()], **blocks())
    failed = verdict(GDR, node)
    assert failed is not None and not isinstance(failed, str)
    [finding] = failed.findings
    assert finding.found.startswith("no peer-memory module loaded")
    intended = verdict(check_as_intended, node, NvidiaPeermem())
    assert intended is not None and not isinstance(intended, str)
    [filed] = intended.findings
    assert filed.because == ("gpudirect_rdma_is_available_where_nccl_uses_it",)


def test_gdr_check_leaves_alone_a_module_switched_off_or_a_reboot_away():
    assert verdict(GDR, checked_node(read(), "hgx-1", **blocks(False))) == \
        "skip: not judged: provision_driver.peermem is false (nvidia_peermem left alone on purpose)"
    pending = verdict(GDR, checked_node(read(installed="580.200.01"), "hgx-1", **blocks()))
    assert isinstance(pending, str) and pending.startswith("skip: pending: nvidia_peermem loads with the installed "
                                                           "driver at the next boot")


def boot_with(*modules: str) -> NextBoot:
    """The next boot's kernel (the only one installed, no GRUB) with these module files."""
    return NextBoot(kernels=[NEXT], modules={NEXT: [f"/lib/modules/{NEXT}/updates/dkms/{m}.ko" for m in modules]})


def test_a_next_kernel_without_peermem_where_it_is_wanted_refuses_the_reboot_and_is_one_finding():
    node = host("hgx-1", **blocks())
    stranded = read(peer=True)
    stranded.driver.next_boot = boot_with("nvidia")
    [reason] = registry.reboot_refusals(node, stranded)
    assert reason.startswith(f"the next boot's kernel {NEXT} (") and "no nvidia-peermem module: it would come back " \
        "without GPUDirect RDMA; fix: `apt-get install linux-headers-" in reason
    failed = verdict(NEXT_PEERMEM, checked_node(stranded, "hgx-1", **blocks()))
    assert failed is not None and not isinstance(failed, str)
    [finding] = failed.findings
    assert finding.found == f"no nvidia-peermem.ko under /lib/modules/{NEXT}: it would come back without GPUDirect RDMA"


def test_the_next_kernel_is_judged_once_for_the_nvidia_module_and_not_at_all_where_peermem_is_not_wanted():
    without_both = read(peer=True)
    without_both.driver.next_boot = boot_with()
    reasons = registry.reboot_refusals(host("hgx-1", **blocks()), without_both)
    assert len(reasons) == 1 and "no nvidia module" in reasons[0]  # the driver's refusal alone: one cause
    assert verdict(NEXT_PEERMEM, checked_node(without_both, "hgx-1", **blocks())).startswith("skip: not applicable")
    not_wanted = read(peer=True)
    not_wanted.driver.next_boot = boot_with("nvidia")
    assert registry.reboot_refusals(host("hgx-1", **blocks(False)), not_wanted) == []

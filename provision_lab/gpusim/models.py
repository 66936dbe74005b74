"""The GPU models: every figure of each, sourced in gpu_models.md; [H100] means the verbatim captures in
tests/fixtures/real/h100-80gb-hbm3."""

from __future__ import annotations

from collections import namedtuple

# namedtuples, not dataclasses: every nvidia-smi call imports this module, and importing `dataclasses` (with
# the `inspect` it imports) costs each call about 12 ms of CPU (tests/unit/provision_lab/test_lab_simzip.py: SLOW_IMPORTS).


class Clocks(namedtuple("Clocks", "graphics sm memory video")):
    __slots__ = ()


class Thermal(namedtuple("Thermal", "shutdown slowdown max_operating target memory_max tlimit_total",
                         defaults=(None, None, None))):
    """Thresholds as -q prints them. With tlimit_total the "T.Limit" layout (current + T.Limit = total)."""

    __slots__ = ()


class Model(namedtuple("Model", [
    "key", "name", "brand", "architecture", "compute_cap", "device_id", "subsystem_id",
    "sub_class",  # PCI sub class: 0x2 3D controller (datacenter), 0x0 VGA (GeForce)
    "vbios", "board_part", "gpu_part",
    "inforom",  # image, OEM, ECC, power management object
    "memory_mib", "reserved_mib", "bar1_mib", "power_default", "power_min", "power_max",
    "pcie_gen", "pcie_width", "pcie_host_max",  # pcie_host_max: None where -q says N/A
    "max_clocks", "idle_clocks",  # Clocks
    "boost_clock",  # None where there is none
    "default_app_clocks",  # (memory, graphics); None where -ac is refused (GeForce)
    "supported_clocks",  # ((memory, (graphics, ...)), ...), as SUPPORTED_CLOCKS lists them
    "locked_mem_clocks",  # -lmc: Ampere or newer, but not Hopper
    "deferred_mem_clocks",  # -lmcd: Hopper's way
    "ecc_mode",  # "Enabled", "Disabled", or None where the GPU has no ECC
    "volta_ecc",  # Volta's per-unit single/double bit ECC counters instead of SRAM/DRAM
    "retired_pages",  # page retirement (pre-Ampere); row remapping otherwise
    "remap_banks",  # None without row remapping
    "mig", "fan", "serial", "gsp", "c2c_mode", "display_attached", "idle_pstate", "idle_power",
    "memory_power", "idle_temp", "memory_temp",  # None where not reported
    "thermal",  # Thermal
    "nvlink",  # "all" (every pair NV<links>), "dgx1" (hybrid cube mesh), "" (PCIe only)
    "nvlink_links", "nvlink_speed",
    "locked_gpu_clocks",  # -lgc: Volta and newer, i.e. every model here
    "events_supported",
    "ecc_cost_mib",  # memory ECC takes where it is enabled: GDDR stores its check bits in-band, HBM beside the data
    # Where MIG mode lives (NVIDIA's MIG user guide; ../shared/reference/node-lifecycle-reference.md 5.1, 5.4):
    # True: a status bit in the InfoROM (Ampere), kept across reboots, and enabling it needs a GPU reset;
    # False: in the loaded driver only (Hopper and later), in effect without a reset, gone when the driver unloads.
    "mig_in_inforom",
], defaults=(0, "", True, "0x00000000000001FF", 0, False))):
    __slots__ = ()

    @property
    def app_clocks(self) -> bool:
        return self.default_app_clocks is not None

    def graphics_clocks(self, memory: int) -> tuple:
        return dict(self.supported_clocks).get(memory, ())

    def memory_clocks(self) -> tuple:
        return tuple(memory for memory, _ in self.supported_clocks)


def descending(top: int, bottom: int, step: int = 15) -> tuple:
    return tuple(range(top, bottom - 1, -step))


def volta_grid(top: int, bottom: int) -> tuple:
    """Volta's 7.5 MHz graphics grid, rounded down (1530, 1522, 1515, ...), as real V100 lists show."""
    return tuple(bottom + k * 15 // 2 for k in range((top - bottom) * 2 // 15, -1, -1))


MODELS = {m.key: m for m in (
    Model(
        key="v100-sxm2-16gb", name="Tesla V100-SXM2-16GB", brand="Tesla", architecture="Volta",
        compute_cap="7.0", device_id="0x1DB110DE", subsystem_id="0x121210DE", sub_class="0x2",
        vbios="88.00.4F.00.09", board_part="900-2G503-0300-000", gpu_part="1DB1-895-A1",
        inforom=("G503.0201.00.03", "1.1", "5.0", "N/A"),
        memory_mib=16384, reserved_mib=240, bar1_mib=16384,
        power_default=300.0, power_min=150.0, power_max=300.0,
        pcie_gen=3, pcie_width=16, pcie_host_max=None,
        max_clocks=Clocks(1530, 1530, 877, 1372), idle_clocks=Clocks(135, 135, 877, 555), boost_clock=1530,
        default_app_clocks=(877, 1312), supported_clocks=((877, volta_grid(1530, 135)),),
        locked_mem_clocks=False, deferred_mem_clocks=False,
        ecc_mode="Enabled", volta_ecc=True, retired_pages=True, remap_banks=None, mig=False, fan=False,
        serial=True, gsp=False, c2c_mode="N/A", display_attached="No",
        idle_pstate="P0", idle_power=44.5, memory_power=None, idle_temp=37, memory_temp=33,
        thermal=Thermal(shutdown=90, slowdown=87, max_operating=83, memory_max=85),
        nvlink="dgx1", nvlink_links=6, nvlink_speed="25.781 GB/s",
    ),
    Model(
        key="rtx-3090", name="NVIDIA GeForce RTX 3090", brand="GeForce", architecture="Ampere",
        compute_cap="8.6", device_id="0x220410DE", subsystem_id="0x147D10DE", sub_class="0x0",
        vbios="94.02.71.40.72", board_part="N/A", gpu_part="2204-300-A1",
        inforom=("G001.0000.03.03", "2.0", "N/A", "N/A"),
        memory_mib=24576, reserved_mib=316, bar1_mib=32768,
        power_default=350.0, power_min=100.0, power_max=375.0,
        pcie_gen=4, pcie_width=16, pcie_host_max=None,
        max_clocks=Clocks(2100, 2100, 9751, 1950), idle_clocks=Clocks(210, 210, 405, 555), boost_clock=None,
        default_app_clocks=None,
        supported_clocks=tuple((m, descending(2100, 210)) for m in (9751, 9501, 5001, 810))
        + ((405, descending(420, 210)),),
        locked_mem_clocks=True, deferred_mem_clocks=False,
        ecc_mode=None, volta_ecc=False, retired_pages=False, remap_banks=None, mig=False, fan=True,
        serial=False, gsp=True, c2c_mode="N/A", display_attached="No",
        idle_pstate="P8", idle_power=27.2, memory_power=None, idle_temp=37, memory_temp=None,
        thermal=Thermal(shutdown=98, slowdown=95, max_operating=93, target=83),
        nvlink="",
    ),
    Model(
        key="rtx-4090", name="NVIDIA GeForce RTX 4090", brand="GeForce", architecture="Ada Lovelace",
        compute_cap="8.9", device_id="0x268410DE", subsystem_id="0xF29710B0", sub_class="0x0",
        vbios="95.02.3C.00.EB", board_part="N/A", gpu_part="2684-301-A1",
        inforom=("G002.0000.00.03", "2.0", "6.16", "N/A"),
        memory_mib=24564, reserved_mib=354, bar1_mib=256,
        power_default=450.0, power_min=150.0, power_max=450.0,
        pcie_gen=4, pcie_width=16, pcie_host_max=4,
        max_clocks=Clocks(3105, 3105, 10501, 2415), idle_clocks=Clocks(210, 210, 405, 1185), boost_clock=None,
        default_app_clocks=None,
        supported_clocks=tuple((m, descending(3105, 210)) for m in (10501, 10251, 5001, 810))
        + ((405, descending(420, 210)),),
        locked_mem_clocks=True, deferred_mem_clocks=False,
        ecc_mode="Disabled", volta_ecc=False, retired_pages=False, remap_banks=192, mig=False, fan=True,
        serial=False, gsp=True, c2c_mode="N/A", display_attached="No",
        idle_pstate="P8", idle_power=20.0, memory_power=None, idle_temp=28, memory_temp=None,
        thermal=Thermal(shutdown=-7, slowdown=-2, max_operating=0, target=84, tlimit_total=84),
        nvlink="", ecc_cost_mib=1536,
    ),
    Model(
        key="h100-80gb-hbm3", name="NVIDIA H100 80GB HBM3", brand="NVIDIA", architecture="Hopper",
        compute_cap="9.0", device_id="0x233010DE", subsystem_id="0x16C110DE", sub_class="0x2",
        vbios="96.00.DA.00.0C", board_part="692-2G520-0200-000", gpu_part="2330-885-A1",
        inforom=("G520.0200.00.05", "2.1", "7.16", "N/A"),
        memory_mib=81559, reserved_mib=480, bar1_mib=131072,
        power_default=700.0, power_min=200.0, power_max=700.0,
        pcie_gen=5, pcie_width=16, pcie_host_max=None,
        max_clocks=Clocks(1980, 1980, 2619, 1545), idle_clocks=Clocks(345, 345, 2619, 765), boost_clock=1980,
        default_app_clocks=(2619, 1980),
        supported_clocks=((2619, descending(1980, 345)), (1593, descending(1980, 345))),
        locked_mem_clocks=False, deferred_mem_clocks=True,
        ecc_mode="Enabled", volta_ecc=False, retired_pages=False, remap_banks=2560, mig=True, fan=False,
        mig_in_inforom=False,
        serial=True, gsp=True, c2c_mode="Disabled", display_attached="Yes",
        idle_pstate="P0", idle_power=73.8, memory_power=32.2, idle_temp=36, memory_temp=38,
        thermal=Thermal(shutdown=-8, slowdown=-2, max_operating=0, memory_max=0, tlimit_total=87),
        nvlink="all", nvlink_links=18, nvlink_speed="26.562 GB/s",
    ),
    Model(  # [H200]: its -q, supported clocks and MIG listings
        key="h200", name="NVIDIA H200", brand="NVIDIA", architecture="Hopper",
        compute_cap="9.0", device_id="0x233510DE", subsystem_id="0x18BF10DE", sub_class="0x2",
        vbios="96.00.A5.00.1A", board_part="692-2G520-0282-001", gpu_part="2335-895-A1",
        inforom=("G520.0282.02.02", "2.1", "7.16", "N/A"),
        memory_mib=143771, reserved_mib=615.5, bar1_mib=262144,  # Reserved 616 MiB, Free 143156: each rounded
        power_default=700.0, power_min=200.0, power_max=700.0,
        pcie_gen=5, pcie_width=16, pcie_host_max=None,
        max_clocks=Clocks(1980, 1980, 3201, 1545), idle_clocks=Clocks(345, 345, 3201, 765), boost_clock=1980,
        default_app_clocks=(3201, 1980),
        supported_clocks=((3201, descending(1980, 345)), (2201, descending(1980, 345))),
        locked_mem_clocks=False, deferred_mem_clocks=True,
        ecc_mode="Enabled", volta_ecc=False, retired_pages=False, remap_banks=3072, mig=True, fan=False,
        mig_in_inforom=False,
        serial=True, gsp=True, c2c_mode="Disabled", display_attached="Yes",
        idle_pstate="P0", idle_power=80.8, memory_power=40.3, idle_temp=41, memory_temp=44,
        thermal=Thermal(shutdown=-8, slowdown=-2, max_operating=0, memory_max=0, tlimit_total=87),
        nvlink="all", nvlink_links=18, nvlink_speed="26.562 GB/s",
    ),
)}


class Board(namedtuple("Board", "key name model gpus nvswitches nvswitch_device")):
    """A baseboard whose GPUs meet through NVSwitches (HGX): they register with the fabric nvidia-fabricmanager
    sets up, and CUDA waits for it (../shared/reference/node-lifecycle-reference.md, 1.1 and 1.5)."""

    __slots__ = ()


# HGX H100 8-GPU: four third-generation NVSwitches, PCI device 10de:22a3 (the FM guide's lspci; AWS ParallelCluster).
BOARDS = {b.key: b for b in (
    Board(key="hgx-h100-8", name="HGX H100 8-GPU", model="h100-80gb-hbm3", gpus=8, nvswitches=4,
          nvswitch_device="10de:22a3"),
)}

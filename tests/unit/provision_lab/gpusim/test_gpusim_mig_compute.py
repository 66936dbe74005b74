"""The simulator's compute instances inside a GPU instance (`mig -lcip`, `-lcipp`, `-cci PROFILE`, `-lci`, the MIG
devices they make), held to real listings found in public walk-throughs (code index; each cited where used):

- [LCIP-580] file id 41190723681: an A100-SXM4-40GB, driver 580.126.09: `-lcip` of a 4g.20gb, 2g.10gb and 1g.5gb
  before and after `-cci 4g.20gb` / `-cci 1c.2g.10gb` (twice) / `-cci 1g.5gb`, the `-lci` and the MIG devices box.
- [LCIP-515] file id 37126368659: an A100 80GB, driver 515.86.01: `-lcip` of a 3g.40gb (1c, 2c, 3g), `-cci
  1c.3g.40gb,1c.3g.40gb` and its `-lci`.
- [LCIP-510] file id 18770773047: an A100-PCIE-40GB, driver 510.47.03: `-lcip` of two GPU instances at once,
  `-cci 0` by ID.
- [MIG-GUIDE-L] file id 20062291686: NVIDIA's MIG user guide, `-L` of an H100 with 1c.3g.40gb devices (R570)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from builders.simulator import Sim, lines, pycache, sim
from provision.capabilities.gpu.mig_listings import parse_compute_instances
from provision.capabilities.gpu.mig_model import ComputeInstance, Placement

__all__ = ["pycache", "sim"]  # the fixtures, used by name

# [LCIP-515] / [LCIP-580]: the 88-column box, verbatim
REAL_LCIP_HEAD = [
    "+--------------------------------------------------------------------------------------+",
    "| Compute instance profiles:                                                           |",
    "| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |",
    "|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |",
    "|         ID                                                          CE    JPEG       |",
    "|======================================================================================|",
]
REAL_LCIP_3G = [  # [LCIP-515], a 3g.40gb of an A100 80GB: the same names' widths as the H100's 3g.40gb
    "|   0      1       MIG 1c.3g.40gb       0      3/3           14        2     0     0   |",
    "|                                                                      3     0         |",
    "+--------------------------------------------------------------------------------------+",
    "|   0      1       MIG 2c.3g.40gb       1      1/1           28        2     0     0   |",
    "|                                                                      3     0         |",
    "+--------------------------------------------------------------------------------------+",
    "|   0      1       MIG 3g.40gb          2*     1/1           42        2     0     0   |",
    "|                                                                      3     0         |",
    "+--------------------------------------------------------------------------------------+",
]


def shape(line: str) -> str:
    """A row with each digit as 9: two rows of the same layout whose values have as many digits compare equal."""
    return re.sub(r"\d", "9", line)


def mig_on(sim: Sim, model: str = "h100-80gb-hbm3") -> Sim:
    sim.configure((model, 1))
    sim.ok("-pm", "1")  # nothing holds the GPU: MIG mode takes effect at once
    sim.ok("-mig", "1")
    return sim


def test_lcip_lists_a_gpu_instances_compute_profiles_in_the_real_layout(sim: Sim) -> None:
    mig_on(sim)
    sim.ok("mig", "-cgi", "9:4")  # GPU instance 1, as in [LCIP-515]
    listed = lines(sim.ok("mig", "-lcip", "-gi", "1"))
    assert listed[:6] == REAL_LCIP_HEAD
    assert [shape(line) for line in listed[6:]] == [shape(line) for line in REAL_LCIP_3G]
    # the H100's own figures: a 3g.40gb's 60 SMs shared out by compute slice, its engines shared
    assert listed[6] == "|   0      1       MIG 1c.3g.40gb       0      3/3           20        3     0     0   |"
    assert listed[12] == "|   0      1       MIG 3g.40gb          2*     1/1           60        3     0     0   |"
    assert listed[7] == "|                                                                      3     3         |"


def test_a_4g_offers_no_3c_and_free_counts_follow_what_is_made(sim: Sim) -> None:
    """[LCIP-580]: a 4g.20gb lists 1c, 2c and 4g (ID 3, the default); after -cci of the 4g profile all read 0."""
    mig_on(sim)
    sim.ok("mig", "-cgi", "5")
    names = [row.split()[4] for row in lines(sim.ok("mig", "-lcip")) if " MIG " in row]
    assert names == ["1c.4g.40gb", "2c.4g.40gb", "4g.40gb"]
    # [LCIP-580] `-cci 4g.20gb`: "... GPU instance ID  2 using profile MIG 4g.20gb (ID  3)"
    assert sim.ok("mig", "-gi", "2", "-cci", "4g.40gb") == (
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile MIG 4g.40gb (ID  3)\n")
    counts = [row.split()[6] for row in lines(sim.ok("mig", "-lcip")) if " MIG " in row]
    assert counts == ["0/4", "0/2", "0/1"]


def test_cci_by_name_twice_places_compute_instances_side_by_side(sim: Sim) -> None:
    """[LCIP-515]: `-cci 1c.3g.40gb,1c.3g.40gb` makes IDs 0 and 1, -lci shows them at 0:1 and 1:1, and the
    2c and 3g profiles no longer fit beside them."""
    mig_on(sim)
    sim.ok("mig", "-cgi", "9:4")
    assert lines(sim.ok("mig", "-i", "0", "-gi", "1", "-cci", "1c.3g.40gb,1c.3g.40gb")) == [
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 using profile MIG 1c.3g.40gb (ID  0)",
        "Successfully created compute instance ID  1 on GPU  0 GPU instance ID  1 using profile MIG 1c.3g.40gb (ID  0)"]
    assert lines(sim.ok("mig", "-i", "0", "-gi", "1", "-lci"))[6:] == [  # [LCIP-515], verbatim
        "|   0      1       MIG 1c.3g.40gb       0         0          0:1     |",
        "+--------------------------------------------------------------------+",
        "|   0      1       MIG 1c.3g.40gb       0         1          1:1     |",
        "+--------------------------------------------------------------------+"]
    # provision's facts read them as two compute instances apart, not the GPU instance's default one
    assert parse_compute_instances(sim.ok("mig", "-lci")).rows == {0: [
        ComputeInstance(1, "1c.3g.40gb", 0, 0, Placement(0, 1)), ComputeInstance(1, "1c.3g.40gb", 0, 1, Placement(1, 1))]}
    counts = [row.split()[6] for row in lines(sim.ok("mig", "-lcip")) if " MIG " in row]
    assert counts == ["1/3", "0/1", "0/1"]
    full = sim.smi("mig", "-gi", "1", "-cci", "2c.3g.40gb")
    assert (full.stdout, full.returncode) == (
        "Unable to create a compute instance on GPU  0 GPU instance ID  1 using profile 2c.3g.40gb: "
        "Insufficient Resources\nFailed to create compute instances: Insufficient Resources\n", 255)


def test_cci_by_id_and_a_profile_the_gpu_instance_does_not_offer(sim: Sim) -> None:
    """[LCIP-510] `-gi 11 -cci 0` on a 1g: "... GPU instance ID 11 using profile MIG 1g.5gb (ID  0)"."""
    mig_on(sim)
    sim.ok("mig", "-cgi", "19:4")  # a 1g.10gb at slot 4: GPU instance 11
    assert sim.ok("mig", "-gi", "11", "-cci", "0") == (
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID 11 using profile MIG 1g.10gb (ID  0)\n")
    wrong = sim.smi("mig", "-gi", "11", "-cci", "2c.1g.10gb")
    assert wrong.returncode == 2 and wrong.stdout.endswith("Failed to create compute instances: Invalid Argument\n")


def test_lcip_lists_every_gpu_instance_in_the_drivers_order(sim: Sim) -> None:
    """[LCIP-510]: -lcip without -gi lists each GPU instance, the smaller profile first (1g's 9 before 2g's 3),
    as -lgi and -lci do ([LCIP-580]: 1g 9, 2g 3, 4g 2; the simulator's IDs per placement are its own)."""
    mig_on(sim)
    sim.ok("mig", "-cgi", "5:0,14:4,19:6", "-C")
    gis = [row.split()[2] for row in lines(sim.ok("mig", "-lcip")) if " MIG " in row]
    assert gis == ["13", "5", "5", "2", "2", "2"]
    assert [row.split()[2] for row in lines(sim.ok("mig", "-lci")) if " MIG " in row] == ["13", "5", "2"]
    assert [row.split()[5] for row in lines(sim.ok("mig", "-lgi")) if " MIG " in row] == ["13", "5", "2"]


def test_lcipp_and_the_mig_mode_off_answer(sim: Sim) -> None:
    sim.configure(("h100-80gb-hbm3", 1))
    # -lcipp with MIG mode off answers as -lcip does on the real H200 (tests/fixtures/real/h200-modes/mig-lcip.txt)
    assert sim.ok("mig", "-lcipp") == "No MIG-enabled devices found.\n"
    sim.ok("-pm", "1")
    sim.ok("-mig", "1")
    assert sim.ok("mig", "-lcip") == "No GPU instances found.\n"
    sim.ok("mig", "-cgi", "0")
    assert lines(sim.ok("mig", "-lcipp")) == [  # -lgipp's wording with the GPU instance (inferred)
        "GPU  0 GI  0 Profile ID  0 Placements: {0,1,2,3,4,5,6}:1",
        "GPU  0 GI  0 Profile ID  1 Placements: {0,2,4}:2",
        "GPU  0 GI  0 Profile ID  2 Placements: {0,3}:3",
        "GPU  0 GI  0 Profile ID  3 Placement : {0}:4",
        "GPU  0 GI  0 Profile ID  4 Placement : {0}:7"]


def test_each_compute_instance_is_a_mig_device_with_its_own_sms(sim: Sim) -> None:
    """[LCIP-580]'s box: two compute instances of one GPU instance are two MIG devices, each with its own SMs and
    the GPU instance's memory; [MIG-GUIDE-L]: -L names them by their compute instance profile."""
    mig_on(sim)
    sim.ok("mig", "-cgi", "9:4")
    sim.ok("mig", "-gi", "1", "-cci", "0,0")
    table = lines(sim.ok())
    start = table.index("| MIG devices:" + " " * 76 + "|")
    assert table[start + 6] == (
        "|  0    1   0   0  |               0MiB / 40448MiB    | 20      0 |  3   0    3    0    3 |")
    assert table[start + 9].startswith("|  0    1   1   1  |               0MiB / 40448MiB    | 20 ")
    listed = [re.sub(r"MIG-[0-9a-f-]{36}", "MIG-uuid", line) for line in lines(sim.ok("-L"))[1:]]
    assert listed == ["  MIG 1c.3g.40gb  Device  0: (UUID: MIG-uuid)", "  MIG 1c.3g.40gb  Device  1: (UUID: MIG-uuid)"]


# A real -q's MIG Device block (code index file id 69774384440: driver 610, a GA100 with one instance), verbatim
# but for the figures, which are that card's
REAL_Q_MIG_DEVICE = """\
    MIG Device
        Index                                          : 0
        GPU Instance ID                                : 0
        Compute Instance ID                            : 0
        Device Attributes
            Shared
                Multiprocessor count                   : 70
                Copy Engine count                      : 5
                Encoder count                          : 0
                Decoder count                          : 0
                OFA count                              : 0
                JPG count                              : 0
        Shared FB Memory Usage
            Total                                      : 64912 MiB
            Reserved                                   : 0 MiB
            Used                                       : 1 MiB
            Free                                       : 64912 MiB
        Shared BAR1 Memory
            Total                                      : 65536 MiB
            Used                                       : 0 MiB
            Free                                       : 65535 MiB
"""


def labels(block: str) -> list[str]:
    """Each line without its value: the indentation and the label."""
    return [line.split(" : ", 1)[0].rstrip() for line in block.splitlines()]


def test_q_prints_a_mig_device_block_per_compute_instance_after_mig_mode(sim: Sim) -> None:
    mig_on(sim)
    assert "MIG Device" not in sim.ok("-q")  # MIG on, nothing made: no block (as with MIG off on the real H200)
    sim.ok("mig", "-cgi", "9:4")
    sim.ok("mig", "-gi", "1", "-cci", "2c.3g.40gb,1c.3g.40gb")
    report = lines(sim.ok("-q"))
    first = report.index("    MIG Device")
    assert report[first - 3:first] == [
        "    MIG Mode", "        Current                                        : Enabled",
        "        Pending                                        : Enabled"]
    block = report[first:first + 21]
    assert labels("\n".join(block)) == labels(REAL_Q_MIG_DEVICE)
    values = [line.split(" : ", 1)[1] for line in block if " : " in line]
    # device 0: GPU instance 1, compute instance 0 (2c: 40 of the 3g's 60 SMs), the 3g.40gb's engines and memory
    assert values == ["0", "1", "0", "40", "3", "0", "3", "0", "3", "40448 MiB", "0 MiB", "0 MiB", "40448 MiB",
                      "24740 MiB", "0 MiB", "24740 MiB"]
    assert report[first + 21] == "    MIG Device" and report[first + 22].endswith(": 1")
    assert report[first + 42] == "    Accounting Mode                                    : Disabled"


# A real <mig_device> of -q -x (code index file id 9942539751: driver 575, an H100's 3g.40gb, the parts it showed)
REAL_XML_MIG_DEVICE = """\
<mig_device>
    <index>0</index>
    <gpu_instance_id>1</gpu_instance_id>
    <compute_instance_id>0</compute_instance_id>
    <device_attributes>
        <shared>
            <multiprocessor_count>60</multiprocessor_count>
            <copy_engine_count>3</copy_engine_count>
            <encoder_count>0</encoder_count>
            <decoder_count>3</decoder_count>
            <ofa_count>0</ofa_count>
            <jpg_count>3</jpg_count>
        </shared>
    </device_attributes>
    <fb_memory_usage>
        <total>40448 MiB</total>
        <reserved>0 MiB</reserved>
        <used>298 MiB</used>
        <free>40151 MiB</free>
    </fb_memory_usage>
</mig_device>"""


def test_xml_lists_the_mig_devices_as_a_real_driver_does(sim: Sim) -> None:
    mig_on(sim)
    assert "<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>" in sim.ok("-q", "-x")  # as the real H200's, MIG off
    sim.ok("mig", "-cgi", "9:4", "-C")
    xml = sim.ok("-q", "-x")
    block = xml.split("<mig_devices>\n", 1)[1].split("\t\t</mig_devices>", 1)[0]
    got = [line.strip() for line in block.splitlines()]
    real = [line.strip() for line in REAL_XML_MIG_DEVICE.splitlines()]
    # the real block, but for the memory used (a process ran on it) and our BAR1 (which it left out)
    assert got[:19] == real[:17] + ["<used>0 MiB</used>", "<free>40448 MiB</free>"]
    assert got[20:] == ["<bar1_memory_usage>", "<total>24740 MiB</total>", "<used>0 MiB</used>",
                        "<free>24740 MiB</free>", "</bar1_memory_usage>", "</mig_device>"]


def test_every_model_answers_q_x_as_well_formed_xml(sim: Sim) -> None:
    """Held line by line to a real H200's in test_gpusim_golden.py; here every model answers too, one <gpu> each
    with its -q's sections (a Volta's own ECC counters, GeForce's N/A)."""
    models = ("v100-sxm2-16gb", "rtx-3090", "rtx-4090", "h100-80gb-hbm3", "h200")
    sim.configure(*((model, 1) for model in models))
    text = sim.ok("-q", "-x")
    assert text.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n')
    root = ET.fromstring(text.split("\n", 2)[2])
    gpus = root.findall("gpu")
    assert [gpu.findtext("product_name") for gpu in gpus] == [
        "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB HBM3",
        "NVIDIA H200"]
    assert all(gpu.find("supported_clocks") is not None and gpu.find("mig_devices") is not None for gpu in gpus)

"""The `nvidia-smi mig` parsers against real output: the H200 captures (tests/fixtures/real/h200-modes, MIG mode
disabled) and published listings with instances, each cited where it was printed."""

from __future__ import annotations

from realdata import REAL_H200_MODES, capture

from provision.capabilities.gpu import mig_listings as listings
from provision.capabilities.gpu.mig_model import ComputeInstance, GpuInstance, MigProfile, Placement

# An A100 80GB's -lgi with instances on two GPUs (NVIDIA/DCGM#138, 2023-12-05), the rows of GPUs 0 and 1.
A100_LGI = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 1g.10gb         19        9          2:1     |
+-------------------------------------------------------+
|   0  MIG 1g.10gb         19       10          3:1     |
+-------------------------------------------------------+
|   0  MIG 2g.20gb         14        3          0:2     |
+-------------------------------------------------------+
|   0  MIG 3g.40gb          9        2          4:4     |
+-------------------------------------------------------+
|   1  MIG 1g.10gb         19       13          2:1     |
+-------------------------------------------------------+
|   1  MIG 1g.10gb         19       14          3:1     |
+-------------------------------------------------------+
|   1  MIG 2g.20gb         14        5          0:2     |
+-------------------------------------------------------+
|   1  MIG 3g.40gb          9        1          4:4     |
+-------------------------------------------------------+
"""
# -lci of an A100 40GB as a published MIG walkthrough shows it: a GPU instance split into smaller compute
# instances (1c.2g.10gb) beside full ones, with the Placement column of current drivers.
SPLIT_LCI = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      9       MIG 1g.5gb           0         0          0:1     |
+--------------------------------------------------------------------+
|   0      3       MIG 1c.2g.10gb       0         0          0:1     |
+--------------------------------------------------------------------+
|   0      3       MIG 1c.2g.10gb       0         1          1:1     |
+--------------------------------------------------------------------+
|   0      2       MIG 4g.20gb          3         0          0:4     |
+--------------------------------------------------------------------+
"""
# An older driver's -lci, without the Placement column (NVIDIA's MIG user guide, its 1c.3g.20gb example).
OLD_LCI = """\
+-------------------------------------------------------+
| Compute instances:                                    |
| GPU     GPU       Name             Profile   Instance |
|       Instance                       ID        ID     |
|         ID                                            |
|=======================================================|
|   0      1       MIG 1c.3g.20gb       0         0     |
+-------------------------------------------------------+
|   0      1       MIG 1c.3g.20gb       0         1     |
+-------------------------------------------------------+
"""


def test_h200_profiles_as_the_driver_lists_them():
    text, rc = capture("mig-lgip.txt", REAL_H200_MODES)
    listing = listings.parse_profiles(text)
    assert rc == 0 and listing.messages == []
    profiles = listing.rows[0]
    assert [(p.name, p.id) for p in profiles] == [
        ("1g.18gb", 19), ("1g.18gb+me", 20), ("1g.35gb", 15), ("2g.35gb", 14), ("3g.71gb", 9), ("4g.71gb", 5),
        ("7g.141gb", 0)]
    assert profiles[4] == MigProfile("3g.71gb", 9, 2, 2, 69.75)


def test_h200_placements_in_both_spellings():
    text, _ = capture("mig-lgipp.txt", REAL_H200_MODES)
    listing = listings.parse_placements(text)
    assert listing.messages == []
    placements = dict(listing.rows[0])
    assert placements[9] == [Placement(0, 4), Placement(4, 4)]
    assert placements[0] == [Placement(0, 8)]  # "Placement : {0}:8", one start
    assert [p.start for p in placements[19]] == list(range(7))


def test_no_mig_enabled_is_a_state():
    for name, parse in (("mig-lgi.txt", listings.parse_gpu_instances), ("mig-lci.txt", listings.parse_compute_instances)):
        text, rc = capture(name, REAL_H200_MODES)
        listing = parse(text)
        assert rc == 0 and listing.rows == {} and listing.no_mig_enabled


def test_gpu_instances_on_two_gpus():
    listing = listings.parse_gpu_instances(A100_LGI)
    assert listing.messages == [] and sorted(listing.rows) == [0, 1]
    assert listing.rows[0][3] == GpuInstance("3g.40gb", 9, 2, Placement(4, 4))
    assert [gi.id for gi in listing.rows[1]] == [13, 14, 5, 1]


def test_the_h200s_wider_columns_read_alike():
    # The 580 driver's tables are two columns wider (mig-lgip.txt): the rows are matched, not cut at offsets.
    wide = A100_LGI.replace("|   0  MIG 3g.40gb          9", "|   0  MIG 3g.40gb            9")
    assert listings.parse_gpu_instances(wide).rows == listings.parse_gpu_instances(A100_LGI).rows


def test_compute_instances_with_and_without_placement():
    split = listings.parse_compute_instances(SPLIT_LCI).rows[0]
    assert split[1] == ComputeInstance(3, "1c.2g.10gb", 0, 0, Placement(0, 1))
    old = listings.parse_compute_instances(OLD_LCI).rows[0]
    assert old == [ComputeInstance(1, "1c.3g.20gb", 0, 0, None), ComputeInstance(1, "1c.3g.20gb", 0, 1, None)]


def test_an_error_is_a_message_never_a_crash():
    said = "Failed to initialize NVML: Driver/library version mismatch"
    for parse in (listings.parse_profiles, listings.parse_placements, listings.parse_gpu_instances,
                  listings.parse_compute_instances):
        listing = parse(said + "\n")
        assert listing.rows == {} and listing.messages == [said] and not listing.no_mig_enabled
    assert listings.parse_profiles("").rows == {}

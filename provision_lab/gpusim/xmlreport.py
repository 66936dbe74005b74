"""nvidia-smi -q -x: the -q report (report.py) as the driver's XML, held to a real H200's (tests/fixtures/real/
h200-modes/q-xml.txt, driver 580.159.04; the tags of GPUs without T.Limit and of retired pages: a real Tesla T4's,
../shared/real-outputs supported-clocks/xml-tesla-t4.txt).

The XML is the same tree as -q: each -q line is an element, a heading one with children. What differs is named
here: the tags that are not the label in snake case (TAGS, and the families below), the values without -q's 0x,
the parts the XML shapes its own way (the MIG devices, retired pages, supported clocks, processes), and what only
the XML prints (the power state in the power readings, the supported target temperatures)."""

from __future__ import annotations

import time

from .gpu import Gpu, Host
from .report import Q_SECTIONS, q_processes, q_retired_pages, q_supported_clocks

XML_HEAD = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">', "<nvidia_smi_log>"]

# (the parent's tag, -q's label) -> tag, where it is not the label in snake case; "" is the GPU itself
TAGS = {
    ("", "Serial Number"): "serial", ("", "GPU UUID"): "uuid", ("", "GPU PDI"): "pdi",
    ("", "FRU Part Number"): "gpu_fru_part_number", ("", "Platform Info"): "platformInfo",
    ("", "Inforom BBX Object Flush"): "inforom_bbx_flush", ("", "GPU C2C Mode"): "c2c_mode",
    ("", "Conf Compute Protected Memory Usage"): "cc_protected_memory_usage",
    ("", "Workload Power Profiles"): "power_profiles",
    ("inforom_version", "Image Version"): "img_version", ("inforom_version", "Power Management Object"): "pwr_object",
    ("pci", "Bus"): "pci_bus", ("pci", "Device"): "pci_device", ("pci", "Domain"): "pci_domain",
    ("pci", "Base Classcode"): "pci_base_class", ("pci", "Sub Classcode"): "pci_sub_class",
    ("pci", "Device Id"): "pci_device_id", ("pci", "Bus Id"): "pci_bus_id", ("pci", "Sub System Id"): "pci_sub_system_id",
    ("pci", "GPU Link Info"): "pci_gpu_link_info", ("pci", "Bridge Chip"): "pci_bridge_chip",
    ("pci", "Replays Since Reset"): "replay_counter", ("pci", "Replay Number Rollovers"): "replay_rollover_counter",
    ("pci", "Tx Throughput"): "tx_util", ("pci", "Rx Throughput"): "rx_util",
    ("pci_gpu_link_info", "PCIe Generation"): "pcie_gen", ("pci_gpu_link_info", "Link Width"): "link_widths",
    ("pcie_gen", "Max"): "max_link_gen", ("pcie_gen", "Current"): "current_link_gen",
    ("pcie_gen", "Device Current"): "device_current_link_gen", ("pcie_gen", "Device Max"): "max_device_link_gen",
    ("pcie_gen", "Host Max"): "max_host_link_gen",
    ("link_widths", "Max"): "max_link_width", ("link_widths", "Current"): "current_link_width",
    ("pci_bridge_chip", "Type"): "bridge_chip_type", ("pci_bridge_chip", "Firmware"): "bridge_chip_fw",
    ("clocks_event_reasons", "Idle"): "clocks_event_reason_gpu_idle",
    ("clocks_event_reasons", "Display Clock Setting"): "clocks_event_reason_display_clocks_setting",
    ("clocks_event_reasons_counters", "SW Power Capping"): "clocks_event_reasons_counters_sw_power_cap",
    ("clocks_event_reasons_counters", "Sync Boost"): "clocks_event_reasons_counters_sync_boost",
    ("clocks_event_reasons_counters", "SW Thermal Slowdown"): "clocks_event_reasons_counters_sw_therm_slowdown",
    ("clocks_event_reasons_counters", "HW Thermal Slowdown"): "clocks_event_reasons_counters_hw_therm_slowdown",
    ("clocks_event_reasons_counters", "HW Power Braking"): "clocks_event_reasons_counters_hw_power_brake",
    ("encoder_stats", "Active Sessions"): "session_count", ("fbc_stats", "Active Sessions"): "session_count",
    ("remapped_rows", "Correctable Error"): "remapped_row_corr",
    ("remapped_rows", "Inactive Correctable Error"): "remapped_row_corr_inactive",
    ("remapped_rows", "Uncorrectable Error"): "remapped_row_unc",
    ("remapped_rows", "Inactive Uncorrectable Error"): "remapped_row_unc_inactive",
    ("remapped_rows", "Pending"): "remapped_row_pending", ("remapped_rows", "Remapping Failure Occurred"):
        "remapped_row_failure", ("remapped_rows", "Bank Remap Availability Histogram"): "row_remapper_histogram",
    ("temperature", "GPU Current Temp"): "gpu_temp", ("temperature", "GPU T.Limit Temp"): "gpu_temp_tlimit",
    ("temperature", "GPU Shutdown T.Limit Temp"): "gpu_temp_max_tlimit_threshold",
    ("temperature", "GPU Slowdown T.Limit Temp"): "gpu_temp_slow_tlimit_threshold",
    ("temperature", "GPU Max Operating T.Limit Temp"): "gpu_temp_max_gpu_tlimit_threshold",
    ("temperature", "Memory Current Temp"): "memory_temp",
    ("temperature", "Memory Max Operating T.Limit Temp"): "gpu_temp_max_mem_tlimit_threshold",
    ("temperature", "GPU Shutdown Temp"): "gpu_temp_max_threshold",
    ("temperature", "GPU Slowdown Temp"): "gpu_temp_slow_threshold",
    ("temperature", "GPU Max Operating Temp"): "gpu_temp_max_gpu_threshold",
    ("temperature", "Memory Max Operating Temp"): "gpu_temp_max_mem_threshold",
    ("power_profiles", "Requested Profiles"): "power_profile_requested_profiles",
    ("power_profiles", "Enforced Profiles"): "power_profile_enforced_profiles",
    ("fabric", "CliqueId"): "cliqueId", ("fabric", "ClusterUUID"): "clusterUuid",
    # a MIG device's memory: <fb_memory_usage> in a real 575 driver's XML (code index file id 9942539751); its
    # BAR1 by the GPU's own tag (inferred)
    ("mig_device", "Shared FB Memory Usage"): "fb_memory_usage", ("mig_device", "Shared BAR1 Memory"):
        "bar1_memory_usage",
}
# Current/Pending under these headings: current_<suffix>, pending_<suffix>
MODE_SUFFIXES = {"mig_mode": "mig", "driver_model": "dm", "gpu_operation_mode": "gom",
                 "dram_encryption_mode": "dram_encryption", "ecc_mode": "ecc"}
PREFIXES = {"clocks_event_reasons": "clocks_event_reason_", "row_remapper_histogram": "row_remapper_histogram_"}
CLOCK_PARENTS = {"clocks", "applications_clocks", "default_applications_clocks", "deferred_clocks", "max_clocks",
                 "max_customer_boost_clocks"}
CLOCK_TAGS = {"Graphics": "graphics_clock", "SM": "sm_clock", "Memory": "mem_clock", "Video": "video_clock"}
POWER_PARENTS = {"gpu_power_readings", "gpu_memory_power_readings", "module_power_readings"}
HEX_VALUES = {"pci_bus", "pci_device", "pci_domain", "pci_base_class", "pci_sub_class", "pci_device_id",
              "pci_sub_system_id"}  # -q prints these with 0x, the XML without


def snake(label: str) -> str:
    return "_".join(label.lower().replace("-", "").replace(".", "").split())


def tag_of(parent: str, label: str) -> str:
    label = label.strip()
    if (parent, label) in TAGS:
        return TAGS[parent, label]
    if parent in MODE_SUFFIXES and label in ("Current", "Pending"):
        return f"{label.lower()}_{MODE_SUFFIXES[parent]}"
    if parent in CLOCK_PARENTS:
        return CLOCK_TAGS[label]
    if parent == "utilization":
        return snake(label) + "_util"
    if parent in POWER_PARENTS and label == "Instantaneous Power Draw":
        return "instant_power_draw"
    return PREFIXES.get(parent, "") + snake(label)


def tree(lines: list) -> list:
    """-q's (depth, label, value) lines as elements [tag, value, children]. A line with a value and deeper lines
    under it (HW Slowdown and its kinds) has them as siblings, as the XML does."""
    root: list = ["", None, []]
    stack = [(0, root)]
    for depth, label, value in lines:
        while stack[-1][0] >= depth or stack[-1][1][1] is not None:
            stack.pop()
        parent = stack[-1][1]
        tag = tag_of(parent[0], label)
        text = None if value is None else str(value)
        node: list = [tag, text.removeprefix("0x") if text and tag in HEX_VALUES else text, []]
        parent[2].append(node)
        stack.append((depth, node))
    return root[2]


def leaf(tag: str, value) -> list:
    return [tag, value, []]


def xml_retired_pages(g: Gpu) -> list:
    """<retired_pages>: each kind's count and page list (empty where none), then the pending states."""
    single, double, pending = (value for _, _, value in q_retired_pages(g)[1:])

    def retirement(tag: str, count: str) -> list:
        return [tag, None, [leaf("retired_count", count), leaf("retired_pagelist", "N/A" if count == "N/A" else None)]]

    return [["retired_pages", None, [retirement("multiple_single_bit_retirement", single),
                                     retirement("double_bit_retirement", double),
                                     leaf("pending_blacklist", pending), leaf("pending_retirement", pending)]]]


def xml_supported_clocks(g: Gpu) -> list:
    """Always in the XML: each memory clock with its graphics clocks."""
    lines = q_supported_clocks(g)
    if lines[0][2] is not None:
        return [leaf("supported_clocks", lines[0][2])]
    memories: list = []
    for depth, _, value in lines[1:]:
        if depth == 2:
            memories.append(["supported_mem_clock", None, [leaf("value", value)]])
        else:
            memories[-1][2].append(leaf("supported_graphics_clock", value))
    return [["supported_clocks", None, memories]]


def xml_processes(g: Gpu) -> list:
    """The supported clocks, then the processes and accounted processes (none run on a simulated GPU)."""
    return xml_supported_clocks(g) + [leaf("processes", None), leaf("accounted_processes", None)]


XML_SECTIONS = {q_retired_pages: xml_retired_pages, q_processes: xml_processes}


def gpu_elements(g: Gpu) -> list:
    nodes: list = []
    for section, _, in_full in Q_SECTIONS:
        if in_full:
            nodes += XML_SECTIONS[section](g) if section in XML_SECTIONS else tree(section(g))
    return shaped(nodes)


def shaped(nodes: list) -> list:
    """What the XML adds or groups apart from -q: <mig_devices> (None without any) after <mig_mode>, the power
    state first in the GPU's and the module's power readings, the supported target temperatures."""
    devices = [node for node in nodes if node[0] == "mig_device"]
    nodes = [node for node in nodes if node[0] != "mig_device"]
    state = next(node[1] for node in nodes if node[0] == "performance_state")
    out = []
    for node in nodes:
        if node[0] in ("gpu_power_readings", "module_power_readings"):
            node[2].insert(0, leaf("power_state", state))
        out.append(node)
        if node[0] == "mig_mode":
            out.append(["mig_devices", None, devices] if devices else ["mig_devices", "\n", []])
        if node[0] == "temperature":
            out.append(["supported_gpu_target_temp", None, [leaf("gpu_target_temp_min", "N/A"),
                                                            leaf("gpu_target_temp_max", "N/A")]])
    return out


def escape(text: str) -> str:
    """XML's escapes of text (xml.sax.saxutils would cost every simulated nvidia-smi call its imports)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def serialize(node: list, depth: int) -> list:
    tag, value, children = node
    pad = "\t" * depth
    if children:
        return [f"{pad}<{tag}>", *(line for child in children for line in serialize(child, depth + 1)),
                f"{pad}</{tag}>"]
    if value == "\n":  # a list with nothing in it says so on a line of its own
        return [f"{pad}<{tag}>", f"{pad}\tNone", f"{pad}</{tag}>"]
    if value is None:
        return [f"{pad}<{tag}>", f"{pad}</{tag}>"]
    return [f"{pad}<{tag}>{escape(value)}</{tag}>"]


def render_xml(host: Host, gpus: list) -> str:
    lines = [*XML_HEAD, f"\t<timestamp>{time.asctime()}</timestamp>", f"\t<driver_version>{host.driver}</driver_version>",
             f"\t<cuda_version>{host.cuda}</cuda_version>", f"\t<attached_gpus>{len(host.gpus)}</attached_gpus>"]
    for g in gpus:
        lines.append(f'\t<gpu id="{g.bus_id}">')
        lines += [line for node in gpu_elements(g) for line in serialize(node, 2)]
        lines += ["\t</gpu>", ""]
    return "\n".join(lines + ["</nvidia_smi_log>"]) + "\n"

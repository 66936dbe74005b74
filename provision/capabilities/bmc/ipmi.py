"""What ipmitool prints about the BMC, read: `sel elist` (the System Event Log) and `sdr type "Power Supply"` /
`sdr type Fan` (the sensors now), and which of it means a power supply or a fan in trouble.

Pure functions of the text. Every line shape below was seen in real output, and a line of any other shape
(an OEM record, an error message, a vendor's extra column) is skipped or kept as it is: never a crash.

`ipmitool sel elist`, one entry a line: id (hex) | date | time | sensor type and name | event | direction,
sometimes a last column (a threshold event's reading):
    " 11 | 02/06/2020 | 18:30:50 | Power Supply #0xfb | Power Supply AC lost | Asserted"
        (gengwg/cheatsheets, ipmi.md: `sel list` of a Dell, whose columns elist shares; a sensor no SDR
        names is "#0x" and its number)
    " 30 | 11/15/2019 | 18:50:40 | Power Unit Pwr Unit Status | Power off/down | Asserted"
    " 33 | 11/15/2019 | 18:52:23 | Fan Processor 1 Fan | Lower Non-critical going low  | Asserted"
        (sosreport/sos issue #2015: two spaces after "low", as ipmitool's own string has one)
    " 23 | 11/11/2025 | 01:22:54 PM WET | Power Supply #0xc1 | Failure detected () | Asserted"
    " 24 | 11/11/2025 | 01:22:54 PM WET | Power Supply #0xc1 | Power Supply AC lost () | Asserted"
        (petersulyok/smfc issue #98, a Supermicro H14SHM: a 12-hour clock with its zone, "()" after the event)
    "  a | 01/01/2000 | 00:31:18 | System Firmware Progress #0x05 | Secondary CPU Initialization | Asserted"
        (open-power/op-build issue #594: the id is hex)
    "  1 |  Pre-Init  |0000001895| Power Supply PSU1 Status | Presence detected | Asserted"
    "  3 |  Pre-Init  |0000001897| Fan FAN2 | Lower Critical going low  | Asserted | Reading 400 < Threshold 800 RPM"
        (ipmitool 1.8.19 against a BMC whose clock was never set: OpenIPMI's ipmi_sim, the lab's BMC)
    " 1c | 12/10/2024 | 02:50:36 | Temperature PSU1 Over Temp | Transition to Non-recoverable | Asserted"
    " 9a | 03/09/2025 | 17:57:40 | Fan PSU1 Slow FAN1 | Transition to Non-recoverable | Asserted"
    " 34 | 03/01/2025 | 10:30:57 | Power Supply PSU1 PWR Detect | Failure detected | Asserted"
        (philip-bee-h/vault_backup, 000_workbench/02-dead-nodes.md: `sel elist` of GPU nodes, A100s and L40S, a
        PSU's own temperature and fan as severity sensors, each Asserted then Deasserted seconds later)
    " 15e | 09/15/2016 | 05:07:52 | Processor #0x4e | Transition to Non-recoverable"
    " 160 | 09/15/2016 | 05:07:55 | Memory #0x4b | Transition to Non-recoverable"
        (open-power/op-build issue #644: an OpenPower BMC, no direction column; any sensor may go non-recoverable)
The event words are ipmitool's (its sensor-specific and generic event tables): for a power supply "Presence
detected", "Failure detected", "Predictive failure", "Power Supply AC lost", "AC lost or out-of-range",
"AC out-of-range, but present", "Config Error", "Power Supply Inactive"; for a power unit "Power off/down",
"AC lost", "Soft-power control failure", ...; for redundancy "Fully Redundant", "Redundancy Lost",
"Redundancy Degraded", "Non-Redundant: Insufficient Resources", ...; thresholds "Lower Critical going low";
a severity sensor (generic reading type 07h, ipmitool/ipmitool include/ipmitool/ipmi_sel.h) "Transition to
Critical from less severe", "Transition to Non-recoverable from less severe", "Transition to Non-recoverable".
Some BMCs start their ids again after a restart (ipmi_sim does), so entries are told apart by their whole line
and ordered as the log lists them, never by id.

`ipmitool sdr type "Power Supply"` and `sdr type Fan`: name | number | status | entity | reading or states:
    "PS Redundancy    | 77h | ok  |  7.1 | Fully Redundant"
    "Status           | 85h | ok  | 10.1 | Presence detected"                      (gengwg/ansible README.md:
    "PSU Alert        | 34h | ns  | 208.1 | Event-Only"                             a Dell PowerEdge R740xd and
    "PSU Redundancy   | E8h | ok  | 21.1 | Non-Redundant: Insufficient Resources"  an NVIDIA DGX-1, its V100s'
    "PSU1 Status      | E0h | ok  | 10.1 | Presence detected, Power Supply AC lost" PSUs without AC)
    "Power Supply 1   | 06h | ok  | 10.1 | 0 Watts, Presence detected, Failure detected"
    "Power Supplies   | 08h | ok  | 10.3 | Non-Redundant: Sufficient from Redundant"
        (CollegeBoreal/Laboratoires, 3202/proliant/IPMI/README.md: an HP ProLiant's iLO 2, `sdr elist full`,
        whose columns `sdr type` shares)
    "Ambient Temp     | 0Eh | ok  |  7.1 | 19 degrees C" / "Temp | 01h | ns  |  3.1 | Disabled"
        (tigerblue77/Dell_iDRAC_fan_controller_Docker issue #378: `sdr type temperature` of a PowerEdge R510)
    "CPU2 Vcore       | 05h | ns  |  3.2 | No Reading"   (prometheus-community/ipmi_exporter PR #31)
    "FAN2             | 72h | lnr | 29.2 | 400 RPM"      (ipmitool 1.8.19 and ipmi_sim: a fan below its thresholds)
A discrete sensor's status often stays "ok" while its states say "Failure detected" or "Power Supply AC lost"
(the iLO and DGX-1 lines above; ipmitool/ipmitool issue #176 shows the same for "Redundancy Lost"): the states
are read, not only the status. A threshold sensor's status says which threshold it crossed: ok, nc/lnc/unc
(non-critical), cr/lcr/ucr (critical), nr/lnr/unr (non-recoverable), ns (no reading: an empty bay, a disabled
sensor). Dell's `sdr list` prints "Fan3B | 0 RPM | cr" for a dead fan (ateodorescu/home-assistant-ipmi
issue #52); `sdr type` prints the same status in its third column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ipmitool's sensor type names (`ipmitool sdr type` lists them), as the first words of a SEL entry's sensor.
SENSOR_TYPES = (
    "Temperature", "Voltage", "Current", "Fan", "Physical Security", "Platform Security", "Processor",
    "Power Supply", "Power Unit", "Cooling Device", "Other", "Memory", "Drive Slot / Bay", "POST Memory Resize",
    "System Firmwares", "System Firmware Progress", "System Firmware Error", "Event Logging Disabled",
    "Watchdog1", "System Event", "Critical Interrupt", "Button", "Module / Board", "Microcontroller",
    "Add-in Card", "Chassis", "Chip Set", "Other FRU", "Cable / Interconnect", "Terminator",
    "System Boot Initiated", "Boot Error", "OS Boot", "OS Critical Stop", "Slot / Connector",
    "System ACPI Power State", "Watchdog2", "Platform Alert", "Entity Presence", "Monitor ASIC", "LAN",
    "Management Subsys Health", "Battery", "Session Audit", "Version Change", "FRU State",
)
_BY_LENGTH = sorted(SENSOR_TYPES, key=len, reverse=True)
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_DATE = re.compile(r"^(\d{1,2}/\d{1,2}/\d{2,4}|Pre-Init)$")


@dataclass(frozen=True)
class SelEntry:
    """One line of `ipmitool sel elist`."""

    id: str  # hex, as printed ("1a")
    date: str  # "02/06/2020", "Pre-Init", "" (an OEM record without a time)
    time: str
    sensor_type: str  # "Power Supply"; "" when the sensor column starts with no type ipmitool names
    sensor: str  # "PSU2 Status", "#0xc1" (no SDR names it), or the whole column when it has no known type
    event: str  # "Failure detected", without a trailing "()"
    direction: str  # "Asserted", "Deasserted", "" (an entry that says none)
    line: str  # the line, stripped

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """What tells this entry from another in the log: an id alone does not (see the module's docstring)."""
        return (self.id.lower().lstrip("0"), self.date, self.time, self.sensor, self.event)

    @property
    def when(self) -> str:
        if self.date == "Pre-Init":  # the BMC's clock was not set: time is a counter since it started
            return f"entry {self.id} (BMC clock not set)"
        return f"{self.date} {self.time}".strip() or f"entry {self.id}"


def _fields(line: str) -> list[str]:
    return [f.strip() for f in line.split("|")]


def split_sensor(column: str) -> tuple[str, str]:
    """"Power Supply PSU2 Status" -> ("Power Supply", "PSU2 Status"); "Power Supply #0xC1" -> ("Power Supply",
    "#0xc1"); a column that starts with no sensor type ipmitool names -> ("", column)."""
    for kind in _BY_LENGTH:
        if column == kind or column.startswith(kind + " "):
            name = column[len(kind):].strip()
            return kind, name.lower() if name.lower().startswith("#0x") else name
    return "", column


def event_words(text: str) -> str:
    """The event as ipmitool's table says it: a trailing "()" or "(...)" detail and doubled spaces dropped."""
    return re.sub(r"\s*\([^()]*\)\s*$", "", " ".join(text.split()))


def parse_sel(text: str) -> list[SelEntry]:
    """Every entry of `ipmitool sel elist`, in the log's order; other lines ("SEL has no entries", errors) skipped."""
    entries = []
    for raw in text.splitlines():
        fields = _fields(raw)
        if len(fields) < 3 or not _HEX.match(fields[0]):
            continue
        if _DATE.match(fields[1]) and len(fields) >= 5:
            date, time, rest = fields[1], fields[2], fields[3:]
        else:  # an OEM record without a timestamp: "id | OEM record e0 | data"
            date, time, rest = "", "", fields[1:]
        sensor_type, sensor = split_sensor(rest[0])
        event = event_words(rest[1]) if len(rest) > 1 else ""
        direction = rest[2] if len(rest) > 2 and rest[2] in ("Asserted", "Deasserted") else ""
        entries.append(SelEntry(fields[0], date, time, sensor_type, sensor, event, direction, raw.strip()))
    return entries


@dataclass(frozen=True)
class SdrSensor:
    """One line of `ipmitool sdr type ...`."""

    name: str  # "PSU1 Status"
    number: str  # "#0xe0": as a SEL entry names a sensor no SDR names; "" when not printed
    status: str  # "ok", "ns", "cr", "lnr", ...
    entity: str  # "10.1"
    reading: str  # "7200 RPM", or the asserted states: "Presence detected, Power Supply AC lost"

    @property
    def states(self) -> list[str]:
        return [event_words(s) for s in self.reading.split(",") if s.strip()]

    @property
    def subjects(self) -> tuple[str, ...]:
        """How a SEL entry may name it: by its name, or by its number."""
        return tuple(s for s in (self.name, self.number) if s)


def parse_sdr(text: str) -> list[SdrSensor]:
    """Every sensor of `ipmitool sdr type ...`; other lines (errors, "Sensor Type ... not found") skipped."""
    sensors = []
    for raw in text.splitlines():
        fields = _fields(raw)
        if len(fields) < 4 or not re.match(r"^[0-9A-Fa-f]{1,2}h$", fields[1]):
            continue
        number = f"#0x{int(fields[1][:-1], 16):02x}"
        sensors.append(SdrSensor(fields[0], number, fields[2].lower(), fields[3],
                                 " | ".join(fields[4:]) if len(fields) > 4 else ""))
    return sensors


# --- what counts as trouble -------------------------------------------------------------------------

# Kinds of trouble, each with its next step (the checks add how to accept the events once repaired).
FEED = "feed"  # a PSU lost its input: the cord, the PDU, the circuit
PSU = "psu"  # a PSU failed, or will
REDUNDANCY = "redundancy"  # one PSU (or fan) left carrying the load
FAN = "fan"
VOLTAGE = "voltage"  # a rail out of range: a brownout on the board
HEAT = "heat"
PSU_HEAT = "psu-heat"  # a power supply's own temperature or fan sensor (the sensor's name names the PSU)
BEYOND = "non-recoverable"  # any other part the BMC declared non-recoverable (memory, a processor, the chassis)

NEXT_STEP = {
    FEED: "check that PSU's input: its cord, the PDU outlet and the circuit (a brownout under GPU load trips "
          "it); until every PSU is fed, drain the node or lower its GPU power limit",
    PSU: "replace that power supply (ipmitool sdr type \"Power Supply\" names it); until then drain the node: "
         "at full GPU load the others may not carry it",
    REDUNDANCY: "one power supply (or fan) carries the node alone: bring back the missing one (see the PSU and "
                "fan findings); drain the node until then",
    FAN: "replace or reseat that fan (ipmitool sdr type Fan names it) and check the airflow; the GPUs "
         "throttle or the node shuts down without it",
    VOLTAGE: "a supply rail went out of range (a brownout): check the power supplies and their feed",
    HEAT: "check the fans, the airflow and the inlet temperature",
    PSU_HEAT: "that power supply overheated or its own fan failed: check its fan and the air at its intake and "
              "exhaust; replace it if it happens again (its fan is part of it); until then drain the node: if it trips "
              "at full GPU load, the others carry the node alone",
    BEYOND: "the BMC declared that part beyond recovery: have it serviced (`ipmitool sel get ID` shows the "
            "event's data, the vendor's log or support names the part); drain the node until then",
}

# (sensor types, the event as ipmitool words it (lower case, its start), what it means, kind) for Asserted
# entries and states; kind None: PSU for a power sensor, FAN for a cooling one. Power off/down and power cycle
# are someone's action, not a fault: not listed.
_POWER = ("Power Supply", "Power Unit")
_COOLING = ("Fan", "Cooling Device")
TROUBLES: tuple[tuple[tuple[str, ...], str, str, str | None], ...] = (
    (("Power Supply",), "failure detected", "failed", PSU),
    (_POWER, "predictive failure", "predicted to fail", PSU),
    (("Power Supply",), "power supply ac lost", "lost its AC input", FEED),
    (("Power Supply",), "ac lost or out-of-range", "AC input lost or out of range", FEED),
    (("Power Supply",), "ac out-of-range", "AC input out of range", FEED),
    (("Power Supply",), "config error", "configuration error (a mismatched PSU)", PSU),
    (("Power Supply",), "power supply inactive", "inactive", PSU),
    (("Power Unit",), "ac lost", "AC power lost", FEED),
    (("Power Unit",), "failure detected", "power unit failure", PSU),
    (("Power Unit",), "soft-power control failure", "soft-power control failure", PSU),
    (("Power Unit",), "240va power down", "240VA power down", PSU),
    (("Power Unit",), "interlock power down", "interlock power down", PSU),
    ((*_POWER, *_COOLING), "redundancy lost", "redundancy lost", REDUNDANCY),
    ((*_POWER, *_COOLING), "redundancy degraded", "redundancy degraded", REDUNDANCY),
    ((*_POWER, *_COOLING), "non-redundant: insufficient resources", "not enough left to run", REDUNDANCY),
    ((*_POWER, *_COOLING), "non-redundant: sufficient from redundant", "redundancy lost", REDUNDANCY),
    ((*_POWER, *_COOLING), "transition to critical from less severe", "critical", None),
    ((*_POWER, *_COOLING), "transition to non-recoverable", "non-recoverable", None),
)
# Threshold events that mean trouble: below a lower or above an upper critical or non-recoverable threshold.
_THRESHOLD = re.compile(r"^(lower (critical|non-recoverable) going low|upper (critical|non-recoverable) going high)$")
_THRESHOLD_KIND = {"Fan": FAN, "Cooling Device": FAN, "Voltage": VOLTAGE, "Current": VOLTAGE, "Temperature": HEAT}
# A severity sensor's step up (generic reading type 07h): the part reached critical, or beyond recovery.
_WORSE = ("transition to critical from less severe", "transition to non-recoverable")
# A temperature or fan sensor named for a power supply is that supply's own: "PSU1 Over Temp", "PSU2 Slow FAN1"
# (the GPU nodes in this docstring), "PS1 Temp"; OpenBMC's names join words with "_" ("PSU0_TEMP").
_PSU_NAMED = re.compile(r"(?<![a-z])(PSU|PS|PWS)[ _]?\d+(?!\d)", re.IGNORECASE)


@dataclass(frozen=True)
class Trouble:
    meaning: str  # "lost its AC input"
    kind: str  # FEED, PSU, ...


def trouble(sensor_type: str, event: str, direction: str = "Asserted", sensor: str = "") -> Trouble | None:
    """What an event or a state means for the node, None when nothing wrong (or an event's end: Deasserted).
    A power supply's "Presence detected" deasserted is the PSU pulled out; a temperature or fan sensor named for a
    power supply is that supply's; any sensor gone non-recoverable is trouble, whatever its type."""
    said = event.lower()
    if sensor_type == "Power Supply" and said == "presence detected" and direction == "Deasserted":
        return Trouble("removed (presence deasserted)", PSU)
    if direction == "Deasserted":
        return None
    worse = said.startswith(_WORSE)
    if sensor_type in ("Temperature", *_COOLING) and _PSU_NAMED.search(sensor) and (worse or _THRESHOLD.match(said)):
        return Trouble(_severity_words(said) if worse else event, PSU_HEAT)
    if sensor_type in _THRESHOLD_KIND and (_THRESHOLD.match(said) or worse):
        return Trouble(_severity_words(said) if worse else event, _THRESHOLD_KIND[sensor_type])
    for types, words, meaning, kind in TROUBLES:
        if sensor_type in types and said.startswith(words):
            return Trouble(meaning, kind or (FAN if sensor_type in _COOLING else PSU))
    if said.startswith("transition to non-recoverable"):
        return Trouble("non-recoverable", BEYOND)
    return None


def _severity_words(said: str) -> str:
    return "non-recoverable" if said.startswith("transition to non-recoverable") else "critical"


# A threshold sensor's status at or past a critical threshold, in words.
CRITICAL_STATUS = {"cr": "critical", "lcr": "below its lower critical threshold",
                   "ucr": "above its upper critical threshold", "nr": "non-recoverable",
                   "lnr": "below its lower non-recoverable threshold",
                   "unr": "above its upper non-recoverable threshold"}


def sensor_troubles(sensor: SdrSensor, sensor_type: str) -> list[Trouble]:
    """What a sensor's status and states say is wrong now: its states (an "ok" status may hide a failure), else
    a status at or past a critical threshold. [] when nothing is wrong, also for a sensor with no reading (ns:
    an empty bay, a disabled sensor) or one past a non-critical threshold only (a quiet fan trips those)."""
    found = [t for t in (trouble(sensor_type, state, sensor=sensor.name) for state in sensor.states) if t]
    if not found and sensor.status in CRITICAL_STATUS:
        kind = PSU if sensor_type not in _COOLING else PSU_HEAT if _PSU_NAMED.search(sensor.name) else FAN
        found.append(Trouble(f"{sensor.reading or 'no reading'}, {CRITICAL_STATUS[sensor.status]}", kind))
    return found


# --- the record of the last good run ------------------------------------------------------------

RECORD_HEADER = ("# provision: the BMC event log's newest entry when its events were last accepted "
                 "(provision apply --accept-bmc-events); verify judges the entries after it")
EMPTY = "empty"  # the record of a log with no entry


def recorded_entry(record: str | None) -> SelEntry | None:
    """The entry a record names; None for no record, an empty log's record, or one that does not parse."""
    for line in (record or "").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        entries = parse_sel(line)
        return entries[0] if entries else None
    return None


def since_record(entries: list[SelEntry], record: str | None) -> tuple[list[SelEntry], str]:
    """The entries after the recorded one, and which entries those are, in words. Without a record, or when the
    recorded entry is no longer in the log (cleared, or overwritten by newer entries), every entry is after it.
    The first entry equal to the record counts: a later twin (a restarted BMC numbering again) is newer."""
    last = recorded_entry(record)
    if last is not None:
        for i, entry in enumerate(entries):
            if entry.key == last.key:
                return entries[i + 1:], f"since the entry recorded as the last good run's ({last.when})"
        return entries, "since the log was cleared (the recorded entry is gone)"
    if record is not None and any(line.strip() == EMPTY for line in record.splitlines()):
        return entries, "since the last good run (its log was empty)"
    return entries, "(the whole log: no good run recorded yet)"

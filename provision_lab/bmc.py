"""Each lab node's BMC: OpenIPMI's BMC simulator, ipmi_sim (Debian's openipmi, in the node image), with the power
supplies and fans of a GPU server, reached by the real ipmitool over IPMI 2.0 (lanplus) on the node's 127.0.0.1.

What a node gets (Node.create):
- NODE_BMC_DIR: ipmi_sim's lan.conf (the LAN channel on 127.0.0.1:623, one admin user, the console on
  127.0.0.1:NODE_BMC_CONSOLE), bmc.emu (the BMC, its sensors and their state at power-on) and bmc.sdrs (the
  sensors' SDRs, compiled with sdrcomp at each start into NODE_BMC_STATE, where ipmi_sim also keeps its event log:
  it outlives the node's reboots, as a real SEL does);
- provision-lab-bmc.service, enabled: the node's boot starts ipmi_sim (nodeinit.py);
- /etc/provision/bmc.conf and its password file (0600): how `provision verify` reaches this BMC, as an operator
  writes them for a node without /dev/ipmi0 (capabilities/bmc/facts.py). The password is made here, per node, at
  random; it is in those two files only, never on a command line or in the lab's output.

Faults (`provision lab fault NODE KIND`) are the simulator's own console commands, run in the node:
psu-failure and ac-lost log a PSU's failure (its input) and its end, as a brownout that tripped a PSU leaves it;
psu-sensor fails PSU1 and leaves it failed; fan-failed stops FAN1 (below its thresholds); psu-overheat logs PSU1's
own temperature sensor going non-recoverable and back seconds later, and memory-nonrecoverable the board's memory
sensor the same, as the severity sensors of real GPU nodes log them (capabilities/bmc/ipmi.py). `clear` puts the
sensors back and clears the event log with the real `ipmitool sel clear`.
"""

from __future__ import annotations

import os
import secrets

from provision_lab.layout import NODE_BMC_CONSOLE, NODE_BMC_DIR, NODE_BMC_STATE
from provision_lab.system import LabError

BMC_CONF = "/etc/provision/bmc.conf"  # a copy of capabilities/bmc/facts.py CONF (the lab imports no capability)
BMC_PASSWORD = "/etc/provision/bmc.password"
USER = "provision"
NAME = "labbmc"  # ipmi_sim's name for it: its state is NODE_BMC_STATE/ipmi_sim/NAME
UNIT = "provision-lab-bmc.service"
CIPHER_SUITE = 3  # ipmi_sim does not answer "Get Channel Cipher Suites": ipmitool would wait 10 s to ask, then pick 3
MC = "0x20 0"  # the BMC's address and LUN, as the console's sensor commands take them
PSUS, FANS = 2, 4
PSU_SENSOR, FAN_SENSOR = 0x60, 0x70  # PSU i is sensor 0x60 + i, FAN i 0x70 + i
PSU_TEMP_SENSOR, MEMORY_SENSOR = 0x64, 0x80  # PSU i's own temperature is 0x64 + i; the board's memory one sensor
FAN_RPM_PER_UNIT = 100  # a fan's reading is units of 100 RPM (the SDR's m)
FAN_NOMINAL, FAN_STOPPED = 72, 3  # 7200 RPM; 300 RPM: below the lower non-recoverable threshold (500)
# A power supply sensor's states (IPMI 2.0, table 42-3, sensor type 08h): the bits the faults set.
PRESENCE, FAILURE, PREDICTIVE, AC_LOST = 0, 1, 2, 3
# A severity sensor's states (generic reading type 07h, IPMI 2.0 table 42-2): OK, and the step to non-recoverable.
TRANSITION_TO_OK, TRANSITION_TO_NON_RECOVERABLE = 0, 6
FAULTS = ("psu-failure", "ac-lost", "psu-sensor", "fan-failed", "psu-overheat", "memory-nonrecoverable")
STICKY = ("psu-sensor", "fan-failed")  # a failed part stays failed through the node's reboots (the BMC's boot
# sets its sensors up again; the event log keeps what was logged)

SDR_HEADER = """\
sdr type 18
	device_slave_address	0x20
	device_channel_number	0
	chassis			true
	ipmb_event_gen		false
	ipmb_event_recv		false
	fru_inventory		false
	sel			true
	sdr			true
	sensor			true
	entity_id		system_board
	entity_instance		1
	id_string		"lab BMC"
endsdr
"""
# A discrete sensor whose states in `bits` are asserted and deasserted with events: a power supply's status
# (sensor-specific, 6Fh: presence, failure, predictive failure, AC lost) and the severity sensors (generic 07h: OK,
# non-recoverable; a PSU's own temperature, the memory).
DISCRETE_SDR = """
sdr type 1
	sensor_owner_id		0x20
	sensor_owner_lun	0
	channel_number		0
	sensor_number		{number}
	entity_id		{entity}
	entity_instance		{index}
	sensor_type		{sensor_type}
	init_scanning		true
	init_events		true
	init_sensor_type	true
	default_event_gen_on	true
	default_sensor_scan_on	true
	sensor_auto_rearm	true
	sensor_event_msg_ctrl	per_state
	event_reading_type_code	{reading_type}
{events}
	id_string		"{name}"
endsdr
"""


def discrete_sdr(number: int, entity: str, index: int, sensor_type: str, reading_type: str, bits: tuple[int, ...],
                 name: str) -> str:
    events = "\n".join([*(f"\tassert_event{bit}\t\ttrue" for bit in bits),
                        *(f"\tdeassert_event{bit}\t\ttrue" for bit in bits),
                        *(f"\tevent{bit}_state_ret\ttrue" for bit in bits)])
    return DISCRETE_SDR.format(number=hex(number), entity=entity, index=index, sensor_type=sensor_type,
                               reading_type=reading_type, events=events, name=name)


# A fan: a threshold sensor in RPM (100 RPM a unit), lower thresholds non-critical 1200, critical 800,
# non-recoverable 500, each going low logged.
FAN_SDR = """
sdr type 1
	sensor_owner_id		0x20
	sensor_owner_lun	0
	channel_number		0
	sensor_number		{number}
	entity_id		fan_cooling_device
	entity_instance		{index}
	init_scanning		true
	init_events		true
	init_thresholds		true
	init_sensor_type	true
	default_event_gen_on	true
	default_sensor_scan_on	true
	sensor_auto_rearm	true
	sensor_threshold_access	settable
	sensor_event_msg_ctrl	per_state
	sensor_type		Fan
	event_reading_type_code	1
	return_lnc		true
	return_lc		true
	return_lnr		true
	assert_lncgl		true
	deassert_lncgl		true
	assert_lcgl		true
	deassert_lcgl		true
	assert_lnrgl		true
	deassert_lnrgl		true
	analog_data_format	unsigned
	rate_unit		none
	modifier_unit		none
	percentage		false
	base_unit		RPM
	modifier_unit_code	unspecified
	linearization		linear
	m			{m}
	tolerance		0
	b			0
	accuracy		1
	accuracy_exp		0
	sensor_direction	input
	r_exp			0
	b_exp			0
	sensor_maximum		255
	sensor_minimum		0
	lnc_thresh		12
	lc_thresh		8
	lnr_thresh		5
	id_string		"FAN{index}"
endsdr
"""

LAN_CONF = """\
# provision lab: this node's BMC (ipmi_sim), on the node's own loopback only
name "{name}"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 623
    priv_limit admin
    allowed_auths_callback md5
    allowed_auths_user md5
    allowed_auths_operator md5
    allowed_auths_admin md5
    guid {guid}
  endlan
  user 2 true "{user}" "{password}" admin 10 md5
# The simulator's command console: the lab's fault drills (bmc.py), from inside the node only
console 127.0.0.1 {console}
"""

UNIT_FILE = f"""\
[Unit]
Description=provision lab: this node's BMC (ipmi_sim on 127.0.0.1:623)

[Service]
Type=simple
StateDirectory={NODE_BMC_STATE.removeprefix('/var/lib/')}/ipmi_sim/{NAME}
ExecStartPre=/usr/bin/sdrcomp -8 -o {NODE_BMC_STATE}/ipmi_sim/{NAME}/sdr.20.main {NODE_BMC_DIR}/bmc.sdrs
ExecStart=/usr/bin/ipmi_sim -n -c {NODE_BMC_DIR}/lan.conf -f {NODE_BMC_DIR}/bmc.emu -s {NODE_BMC_STATE}

[Install]
WantedBy=multi-user.target
"""


def sdrs() -> str:
    psus = "".join(discrete_sdr(PSU_SENSOR + i, "power_supply", i, "Power_Supply", "0x6f",
                                (PRESENCE, FAILURE, PREDICTIVE, AC_LOST), f"PSU{i} Status") for i in range(1, PSUS + 1))
    fans = "".join(FAN_SDR.format(number=hex(FAN_SENSOR + i), index=i, m=FAN_RPM_PER_UNIT) for i in range(1, FANS + 1))
    severity = (TRANSITION_TO_OK, TRANSITION_TO_NON_RECOVERABLE)
    heat = "".join(discrete_sdr(PSU_TEMP_SENSOR + i, "power_supply", i, "Temperature", "0x07", severity,
                                f"PSU{i} Over Temp") for i in range(1, PSUS + 1))
    return SDR_HEADER + psus + fans + heat + discrete_sdr(MEMORY_SENSOR, "memory_device", 1, "Memory", "0x07", severity,
                                                         "DIMM Status")


def severity_sensors() -> list[str]:
    """The severity sensors' numbers: each PSU's own temperature, the memory."""
    return [*(hex(PSU_TEMP_SENSOR + i) for i in range(1, PSUS + 1)), hex(MEMORY_SENSOR)]


def nominal() -> list[str]:
    """Console commands that put every sensor in its healthy state, without an event."""
    return [*(f"sensor_set_bit_clr_rest {MC} {hex(PSU_SENSOR + i)} {PRESENCE} 1 0" for i in range(1, PSUS + 1)),
            *(f"sensor_set_value {MC} {hex(FAN_SENSOR + i)} {FAN_NOMINAL} 0" for i in range(1, FANS + 1)),
            *(f"sensor_set_bit_clr_rest {MC} {number} {TRANSITION_TO_OK} 1 0" for number in severity_sensors())]


def emu() -> str:
    """The BMC at power-on: the MC with its event log, the sensors, each healthy."""
    lines = ["# provision lab: the node's BMC, its power supplies and fans (bmc.py)", "mc_setbmc 0x20",
             "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr", "sel_enable 0x20 1000 0x0a"]
    lines += [f"sensor_add {MC} {hex(PSU_SENSOR + i)} 0x08 0x6f" for i in range(1, PSUS + 1)]
    lines += [f"sensor_add {MC} {hex(FAN_SENSOR + i)} 0x04 0x01" for i in range(1, FANS + 1)]
    lines += [f"sensor_add {MC} {hex(PSU_TEMP_SENSOR + i)} 0x01 0x07" for i in range(1, PSUS + 1)]
    lines += [f"sensor_add {MC} {hex(MEMORY_SENSOR)} 0x0c 0x07"]
    return "\n".join([*lines, *nominal(), "mc_enable 0x20"]) + "\n"


def install(node) -> None:
    """The node's BMC: ipmi_sim's files, its unit enabled, and how provision reaches it (see the docstring)."""
    password = secrets.token_urlsafe(12)  # 16 characters: IPMI 1.5's longest (2.0 takes 20), both sides agree
    node.write(f"{NODE_BMC_DIR}/lan.conf", LAN_CONF.format(name=NAME, guid=secrets.token_hex(16), user=USER,
                                                           password=password, console=NODE_BMC_CONSOLE), mode=0o600)
    node.write(f"{NODE_BMC_DIR}/bmc.emu", emu())
    node.write(f"{NODE_BMC_DIR}/bmc.sdrs", sdrs())
    node.write(f"/etc/systemd/system/{UNIT}", UNIT_FILE)
    link = node.root / "etc/systemd/system/multi-user.target.wants" / UNIT
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        os.symlink(f"/etc/systemd/system/{UNIT}", link)
    node.write(BMC_PASSWORD, password + "\n", mode=0o600)
    node.write(BMC_CONF, "# provision lab: how `provision verify` reaches this node's BMC (it has no /dev/ipmi0)\n"
                         f"host 127.0.0.1\nport 623\nuser {USER}\npassword_file {BMC_PASSWORD}\n"
                         f"cipher_suite {CIPHER_SUITE}\n", mode=0o600)


# Run in the node: send each argument to ipmi_sim's console, waiting for its prompt (the BMC starts with the
# node's boot: it is waited for a while). Exits non-zero, saying why, when the console does not answer.
CONSOLE = r'''
import socket, sys, time
deadline = time.monotonic() + 15
while True:
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"the node's BMC does not answer on its console (127.0.0.1:{sys.argv[1]}): {exc}")
        time.sleep(0.2)
def prompt():
    said = b""
    while not said.endswith(b"> "):
        chunk = s.recv(4096)
        if not chunk:
            sys.exit("the BMC's console closed")
        said += chunk
    return said
prompt()
for command in sys.argv[2:]:
    s.sendall(command.encode() + b"\n")
    prompt()
s.close()
'''


def console(node, *commands: str) -> None:
    done = node.exec(["python3", "-c", CONSOLE, str(NODE_BMC_CONSOLE), *commands], check=False)
    if done.returncode != 0:
        raise LabError(f"{node.spec.name}: {(done.stderr or done.stdout).strip() or 'the BMC console failed'}")


def has_bmc(node) -> bool:
    """Nodes made before the lab had BMCs have none."""
    return (node.root / NODE_BMC_DIR.lstrip("/") / "bmc.emu").exists()


def inject(node, kind: str) -> str:
    """One BMC fault (FAULTS); what was done, in words (as the lab's state records it)."""
    if not has_bmc(node):
        raise LabError(f"{node.spec.name} has no BMC (a lab made before the lab had them): down and up again", 2)
    psu, fan = hex(PSU_SENSOR + 1), hex(FAN_SENSOR + 1)
    if kind in ("psu-failure", "ac-lost"):  # asserted, then deasserted: it happened, and is over
        bit = FAILURE if kind == "psu-failure" else AC_LOST
        console(node, f"sensor_set_bit {MC} {psu} {bit} 1 1", f"sensor_set_bit {MC} {psu} {bit} 0 1")
        return f"{kind} PSU1"
    if kind == "psu-sensor":
        console(node, f"sensor_set_bit {MC} {psu} {FAILURE} 1 1")
        return f"{kind} PSU1"
    if kind == "fan-failed":
        console(node, f"sensor_set_value {MC} {fan} {FAN_STOPPED} 1")
        return f"{kind} FAN1"
    if kind in ("psu-overheat", "memory-nonrecoverable"):  # asserted, then deasserted seconds later, as logged
        number, part = (hex(PSU_TEMP_SENSOR + 1), "PSU1") if kind == "psu-overheat" else (hex(MEMORY_SENSOR), "DIMM")
        console(node, f"sensor_set_bit {MC} {number} {TRANSITION_TO_NON_RECOVERABLE} 1 1",
                f"sensor_set_bit {MC} {number} {TRANSITION_TO_NON_RECOVERABLE} 0 1")
        return f"{kind} {part}"
    raise LabError(f"unknown BMC fault {kind!r}; one of {', '.join(FAULTS)}", 2)


def clear(node) -> None:
    """Every sensor healthy again (no event), then the event log cleared with ipmitool, as an operator does."""
    if not has_bmc(node):
        return
    console(node, *nominal())
    node.exec(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-U", USER, "-f", BMC_PASSWORD,
               "-C", str(CIPHER_SUITE), "sel", "clear"])


def after_boot(node, faults: list[str]) -> None:
    """The BMC started again with the node, its sensors healthy: a part that failed is failed again (no new event;
    the log kept the first)."""
    commands = []
    for fault in faults:
        if fault.startswith("psu-sensor"):
            commands.append(f"sensor_set_bit {MC} {hex(PSU_SENSOR + 1)} {FAILURE} 1 0")
        elif fault.startswith("fan-failed"):
            commands.append(f"sensor_set_value {MC} {hex(FAN_SENSOR + 1)} {FAN_STOPPED} 0")
    if commands and has_bmc(node):
        console(node, *commands)

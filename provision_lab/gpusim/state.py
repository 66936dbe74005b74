"""The config (the host's GPUs) and the state (what the GPUs are now: settings, faults, the driver loaded, the
persistence daemon), one JSON file under a lock."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator

from .env import env_path, pidfile_path
from .errors import SimError
from .kernel import load_driver
from .models import BOARDS, MODELS, Model

# --- config and state -----------------------------------------------------------------------

STATE_VERSION = 3  # 2: the health keys of new_record (ECC, retired pages, remapped rows, clock events); 3: NVLink
OVERRIDABLE = ("uuid", "bus_id", "vbios", "serial", "module_id", "pdi")
VOLATILE = ("power_limit", "app_clocks", "locked_gpu", "locked_mem", "compute_mode")  # lost when the driver unloads


def load_config() -> dict | None:
    """The node's GPUs; None where there is no config (a host whose driver is not loaded)."""
    path = env_path("NVIDIA_SIM_CONFIG")
    try:
        with open(path) as fh:
            config = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SimError(f"cannot read the config {path}: {exc}")
    if not isinstance(config, dict) or not isinstance(config.get("gpus", []), list):
        raise SimError(f"{path}: expected {{\"gpus\": [{{\"model\": M, \"count\": N}}, ...]}}")
    for entry in config.get("gpus", []):
        if not isinstance(entry, dict) or entry.get("model") not in MODELS:
            raise SimError(f"{path}: unknown GPU {entry!r}; models: {', '.join(MODELS)}")
    check_nics(path, config)
    check_board(path, config)
    return config


def check_board(path: str, config: dict) -> None:
    """A board (NVSwitch) holds its own GPUs: exactly its model, as many as it has."""
    key = config.get("board")
    if key is None:
        return
    board = BOARDS.get(key)
    if board is None:
        raise SimError(f"{path}: unknown board {key!r}; boards: {', '.join(BOARDS)}")
    if config.get("gpus") != [{"model": board.model, "count": board.gpus}]:
        raise SimError(f'{path}: board {key} holds "gpus": [{{"model": "{board.model}", "count": {board.gpus}}}]')


def require_config() -> dict:
    config = load_config()
    if config is None:
        raise SimError(f"no config at {env_path('NVIDIA_SIM_CONFIG')}")
    return config


def check_nics(path: str, config: dict) -> None:
    """NICs with a name, a NUMA node the host has and, if any, a near GPU slot the config has."""
    nics = config.get("nics", [])
    slots = sum(int(entry.get("count", 1)) for entry in config.get("gpus", []))
    nodes = int(config.get("numa_nodes") or 1)

    def fits(nic) -> bool:
        if not isinstance(nic, dict) or not isinstance(nic.get("name"), str) or not nic["name"]:
            return False
        bounds = (("numa", nodes), ("near_gpu", slots))
        return all(nic.get(key) is None or nic[key] in range(top) for key, top in bounds)

    if not isinstance(nics, list) or not all(fits(nic) for nic in nics):
        raise SimError(f'{path}: expected "nics": [{{"name": "mlx5_0", "numa": 0..{nodes - 1}, '
                       f'"near_gpu": 0..{slots - 1} (optional)}}, ...], got {nics!r}')


def config_digest(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def new_state(config: dict) -> dict:
    hostname = os.uname().nodename  # gethostname(2), without importing socket
    records: list[dict] = []
    for entry in config.get("gpus", []):
        count = int(entry.get("count", 1))
        for k in range(count):
            records.append(new_record(len(records), MODELS[entry["model"]], overrides(entry, k, count), hostname))
    state = {
        "version": STATE_VERSION,
        "config_digest": config_digest(config),
        "hostname": hostname,
        "cpus": int(config.get("cpus") or os.cpu_count() or 1),
        "numa_nodes": int(config.get("numa_nodes") or 1),
        "virtualization_mode": str(config.get("virtualization_mode") or "None"),
        "nics": [{"name": nic["name"], "numa": nic.get("numa"), "near_gpu": nic.get("near_gpu")}
                 for nic in config.get("nics", [])],
        "boot_time": time.time(),
        "daemon": None,
        "gpus": records,
        "nvswitches": nvswitches(config),
    }
    for record in records if state["nvswitches"] else []:  # registered with the fabric once its manager runs
        record.update(fabric_state="In Progress", fabric_status=None)
    load_driver(state, config)  # first use: as if the machine had booted with the driver on disk
    return state


def nvswitches(config: dict) -> list:
    """The board's NVSwitches by PCI address, after the GPUs' buses; none on a board without them."""
    board = BOARDS.get(config.get("board") or "")
    return [f"0000:{0xc5 + k:02x}:00.0" for k in range(board.nvswitches)] if board else []


def overrides(entry: dict, k: int, count: int) -> dict:
    found = {}
    for key in OVERRIDABLE:
        if key not in entry:
            continue
        value = entry[key]
        if isinstance(value, list):
            if len(value) != count:
                raise SimError(f"config: {key} has {len(value)} values for {count} GPUs of {entry['model']}")
            found[key] = value[k]
        elif count == 1:
            found[key] = value
        else:
            raise SimError(f"config: {key} for {count} GPUs must be a list of {count} values")
    return found


def new_record(slot: int, model: Model, given: dict, hostname: str) -> dict:
    # Identity derived from host and slot: stable across runs, different on every node.
    h = hashlib.sha256(f"{hostname}/{slot}/{model.key}".encode()).hexdigest()
    record = {
        "slot": slot,
        "model": model.key,
        "uuid": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
        "bus_id": f"00000000:{0x01 + 0x10 * (slot % 16):02X}:{slot // 16:02X}.0",
        "vbios": model.vbios,
        "serial": str(int(h[32:44], 16) % 10**13).zfill(13) if model.serial else None,
        "module_id": slot + 1,
        "pdi": f"0x{int(h[44:60], 16):x}",
        "legacy_pm": False,  # persistence set by nvidia-smi -pm 1 without the daemon
        "daemon_pm": None,  # persistence set through the running daemon; None: the daemon's default
        "deferred_mem": None,  # -lmcd value, applied at the next boot
        "deferred_active": None,  # the -lmcd value in force since the last boot
        "off_bus": False,  # fallen off the bus since boot: enumerated, but its handle fails
        "gone": False,  # not enumerated at all (dead, pulled): the others are renumbered
        "link": None,  # {"gen": g, "width": w} when the link trained below its maximum
    }
    record.update({key: None for key in VOLATILE})
    record.update(healthy())
    record.update(given)
    return record


def healthy() -> dict:
    """A GPU's health keys with nothing wrong (state version 3)."""
    return {
        "ecc_volatile": 0,  # uncorrectable (double bit) ECC errors in device memory since the driver loaded
        "ecc_aggregate": 0,  # the same over the board's life (kept in its InfoROM: survives everything)
        "retired_dbe": 0,  # pages retired for a double bit error (page retirement: Volta)
        "retired_pending": False,  # a retired page not yet blacklisted: the next boot does it
        "remap_unc": 0,  # rows remapped for an uncorrectable error (row remapper: Ampere and later)
        "remap_pending": False,  # a row marked for remapping: the next GPU reset (here: boot) does it
        "remap_failure": False,  # a remapping ever failed
        "forced_reasons": 0,  # clock event reason bits a hardware fault holds active (NVML bit values)
        "reasons_since": {},  # hex bit -> since when (time.time()): the fault, or the last driver load
        "nvlink_down": [],  # NVLink links that no longer train (a bad bridge or board): <inactive>
        "nvlink_errors": {},  # link ("2") -> [replay, recovery, CRC] errors since the driver loaded
        "bad_riser": False,  # its link logs corrected AER errors under load only (read with .get: newer key)
    }


def migrate(state: dict) -> dict | None:
    """An older state file brought up to STATE_VERSION; None where it cannot be."""
    if state.get("version") in (1, 2):  # before the health keys (1) or the NVLink ones (2): nothing wrong yet
        for record in state.get("gpus", []):
            for key, value in healthy().items():
                record.setdefault(key, value)
        state["version"] = STATE_VERSION
    return state if state.get("version") == STATE_VERSION else None


def load_state(path: str) -> dict | None:
    try:
        with open(path) as fh:
            state = json.load(fh)
    except (OSError, ValueError):
        return None
    return migrate(state) if isinstance(state, dict) else None


def save_state(path: str, state: dict) -> None:
    """Temp file + rename: a reader sees the old state or the new one, never half of one."""
    # Named by pid, not by tempfile.mkstemp (whose import, about 10 ms, every nvidia-smi call would pay): only a
    # dead process of the same pid can have left one behind.
    tmp = os.path.join(os.path.dirname(path) or ".", f".state-{os.getpid()}.json")
    try:
        with open(tmp, "w") as fh:
            json.dump(state, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def open_state(config: dict, fresh: bool = False) -> Iterator[dict]:
    """The state under an exclusive lock (several nvidia-smi may run at once), saved if it changed.

    A user who can read but not write the state directory still gets answers to queries.
    """
    path = env_path("NVIDIA_SIM_STATE")
    lock = None
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        lock = open(path + ".lock", "a+")
    except OSError:
        pass
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        state = None if fresh else load_state(path)
        if state is None or state.get("config_digest") != config_digest(config):
            state = new_state(config)  # first use, or the config changed: new hardware
        before = json.dumps(state, sort_keys=True)
        yield state
        if lock is not None and json.dumps(state, sort_keys=True) != before:
            save_state(path, state)
    finally:
        if lock is not None:
            lock.close()


def reset_volatile(record: dict) -> None:
    for key in VOLATILE:
        record[key] = None


# --- the persistence daemon, as nvidia-smi sees it ------------------------------------------


def live_daemon_pid() -> int | None:
    try:
        with open(pidfile_path()) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by someone else
    return pid


def sync_daemon(state: dict) -> dict | None:
    """The running daemon's record, or None. A daemon that died takes its per-GPU settings with it."""
    pid = live_daemon_pid()
    daemon = state.get("daemon")
    if daemon and daemon.get("pid") != pid:
        daemon = state["daemon"] = None
        for record in state["gpus"]:
            record["daemon_pm"] = None
    if pid and not daemon:
        daemon = state["daemon"] = {"pid": pid, "persistence": True}
    return daemon


def is_persistent(record: dict, daemon: dict | None) -> bool:
    if record["legacy_pm"]:
        return True
    if daemon is None:
        return False
    return record["daemon_pm"] if record["daemon_pm"] is not None else daemon["persistence"]


def unload_idle_gpus(state: dict, daemon: dict | None) -> None:
    """Without persistence the driver lets go of a GPU when its last client exits: settings are lost."""
    for record in state["gpus"]:
        if not is_persistent(record, daemon):
            reset_volatile(record)

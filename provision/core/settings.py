"""Typed settings blocks of the inventory: gpu, driver, nccl, launcher, slurm, plus free-form custom.

Every block refuses unknown keys and takes YAML values as written (strict:
"200" is not a number, 1 is not true, 580.65 is not a version string). A key
left out is None: provision leaves that setting alone. "default" restores the
driver's default where a setting allows it.

parse_host_settings() is the one entry point: it returns problems in our
Problem format (file, where, dotted key, what is allowed, hint), never a raw
pydantic ValidationError.
"""

from __future__ import annotations

import difflib
import inspect
import re
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, ValidationError,
                      ValidationInfo, field_validator, model_validator)
from pydantic_core import PydanticCustomError

from provision.capabilities.nccl import variables as nccl_variables
from provision.core.errors import Problem

MAX_WATTS = 1500  # above any single GPU made; catches kW and mW typos
NCCL_MAX_SOCKETS = 64  # NCCL docs (NCCL_NSOCKS_PERTHREAD): threads x sockets per thread cannot exceed 64


def refuse(message: str, hint: str = "") -> PydanticCustomError:
    """The error our validators raise: the message and hint reach the Problem as written."""
    return PydanticCustomError("provision", "{message}", {"message": message, "hint": hint})


def setting(default: Any = None, allowed: str = "", hint: str = "", **constraints) -> Any:
    """A field whose `allowed` text (range or choices) and hint are shown when its value is refused."""
    return Field(default, description=allowed, json_schema_extra={"hint": hint} if hint else None, **constraints)


QUOTED_NUMBER = re.compile(r"^\s*[+-]?\d+(\.\d+)?\s*$")  # "200", "150.5": YAML reads them as numbers unquoted


def or_words(value_type: Any, *words: str, number: str = "") -> Any:
    """value_type, or one of `words` (like "default"). Strings go to the words, anything else to value_type,
    so an error speaks of one of them, not both. With `number` ("a number of watts"), a quoted number is
    refused as that, not the string: `power_limit: "200"` is a number written as text, not a misspelt word."""
    def _quoted_number(value: Any) -> Any:
        if number and isinstance(value, str) and value not in words and QUOTED_NUMBER.match(value):
            raise refuse(f"got {value!r}: {number}, not the string {value!r}",
                         f"write {value.strip()} without quotes: YAML reads a quoted number as text")
        return value

    return Annotated[
        Annotated[Union[Annotated[value_type, Tag("[value]")], Annotated[Literal[words], Tag("[word]")]],
                  Discriminator(lambda v: "[word]" if isinstance(v, str) else "[value]")],
        BeforeValidator(_quoted_number),
    ]


PositiveInt = Annotated[int, Field(gt=0)]
Watts = Annotated[Union[int, float], Field(gt=0, le=MAX_WATTS)]  # int kept: files and reports show 200, not 200.0
Port = Annotated[int, Field(ge=1, le=65535)]
AbsolutePath = Annotated[str, Field(pattern=r"^/")]


def _numbers_as_text(value: Any) -> Any:
    """`OMP_NUM_THREADS: 8` is natural YAML, and an environment holds text anyway: numbers become text."""
    if not isinstance(value, dict):
        return value
    return {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in value.items()}


EnvVars = Annotated[dict[str, str], BeforeValidator(_numbers_as_text)]


class Block(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*")
    @classmethod
    def _one_line_of_text(cls, value: Any, info: ValidationInfo) -> Any:
        """Settings end up in files and command lines: no control character (newline, escape) in any text,
        except in the free-form `custom` block (templates may want several lines)."""
        if info.field_name != "custom" and _has_control_character(value):
            raise refuse("has a control character (a newline, a carriage return, an escape, ...)",
                         "write one line of printable text")
        return value


def _has_control_character(value: Any) -> bool:
    if isinstance(value, str):
        return not value.isprintable()
    if isinstance(value, dict):
        return any(_has_control_character(k) or _has_control_character(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_control_character(v) for v in value)
    return False  # numbers, booleans, nested blocks (which check their own fields)


# --- gpu -------------------------------------------------------------------------------------------

CLOCKS_HINT = "nvidia-smi -q -d SUPPORTED_CLOCKS lists the valid mem,sm pairs"


class ClockSettings(Block):
    """Application clocks (nvidia-smi -ac MEM,SM); GeForce boards take none: use locked_clocks there."""

    mem: PositiveInt = setting(..., "MHz, an integer > 0", CLOCKS_HINT)
    sm: PositiveInt = setting(..., "MHz, an integer > 0", CLOCKS_HINT)
    nearest: bool = setting(False, "true or false: use the nearest supported pair instead of refusing")


ClockRange = tuple[PositiveInt, PositiveInt]
RANGE_ALLOWED = "[MIN, MAX] in MHz (integers > 0, MIN <= MAX), or one integer for [v, v]"


class LockedClocks(Block):
    """Locked clock ranges (nvidia-smi -lgc / -lmc): what GeForce boards accept instead of application clocks."""

    sm: ClockRange | None = setting(None, RANGE_ALLOWED)
    mem: ClockRange | None = setting(None, RANGE_ALLOWED)

    @field_validator("sm", "mem", mode="before")
    @classmethod
    def _as_range(cls, value: Any) -> Any:
        """One MHz value means [v, v]; a YAML list becomes a (min, max) pair."""
        if isinstance(value, int) and not isinstance(value, bool):
            return (value, value)
        return tuple(value) if isinstance(value, list) else value

    @field_validator("sm", "mem")
    @classmethod
    def _min_le_max(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and value[0] > value[1]:
            raise refuse(f"MIN {value[0]} is above MAX {value[1]}; allowed: {RANGE_ALLOWED}", "write [MIN, MAX]")
        return value

    @model_validator(mode="after")
    def _something_locked(self) -> LockedClocks:
        if self.sm is None and self.mem is None:
            raise refuse("locked_clocks sets neither sm nor mem",
                         'give sm and/or mem, or write locked_clocks: "default"')
        return self


# Module-level aliases: linters read strings inside annotations as type names.
PowerLimit = or_words(Watts, "default", number="a number of watts")
Clocks = or_words(ClockSettings, "default")
ClockLocks = or_words(LockedClocks, "default")


class GpuTuning(Block):
    """What can be set per GPU: the gpu block itself and each of its overrides."""

    persistence: bool | None = setting(None, "true or false")
    power_limit: PowerLimit | None = setting(
        None, f'watts, > 0 and <= {MAX_WATTS}, or "default"', "nvidia-smi -q -d POWER shows each GPU's min and max")
    clocks: Clocks | None = setting(
        None, '{mem: MHz, sm: MHz, nearest: bool} or "default"')
    locked_clocks: ClockLocks | None = setting(
        None, '{sm: [MIN, MAX], mem: [MIN, MAX]} or "default"')


TUNING_KEYS = tuple(GpuTuning.model_fields)
SELECTORS = ("model", "index", "uuid")  # least specific first


class GpuOverride(GpuTuning):
    """Settings for some GPUs of a host, chosen by exactly one selector."""

    index: int | None = setting(None, "a GPU index as nvidia-smi shows it, >= 0", ge=0)
    uuid: str | None = setting(None, 'a GPU UUID, e.g. "GPU-4f3a..." (nvidia-smi -L)', pattern=r"^GPU-[0-9a-fA-F-]+$")
    model: str | None = setting(None, 'part of the GPU name, any case, e.g. "V100"', min_length=1)

    @model_validator(mode="after")
    def _one_selector(self) -> GpuOverride:
        given = [s for s in SELECTORS if getattr(self, s) is not None]
        if len(given) != 1:
            found = f"got {', '.join(given)}" if given else "got none"
            raise refuse(f"an override needs exactly one selector: model, index or uuid ({found})",
                         "write one override entry per selector")
        return self

    @property
    def specificity(self) -> int:
        """model 0 < index 1 < uuid 2: a more specific override is applied later, so it wins."""
        return next(i for i, s in enumerate(SELECTORS) if getattr(self, s) is not None)

    def matches(self, index: int | None, uuid: str, name: str) -> bool:
        if self.uuid is not None:
            return self.uuid.lower() == uuid.lower()
        if self.index is not None:
            return self.index == index
        return self.model.lower() in name.lower()


class GpuSettings(GpuTuning):
    overrides: list[GpuOverride] = setting([], "a list of {index|uuid|model: ..., plus settings}")
    # What the host must have: verify fails with fewer or more (a card gone after maintenance).
    count: int | None = setting(None, "the number of GPUs the host has, an integer 1..64", ge=1, le=64)

    def for_gpu(self, index: int | None, uuid: str, name: str) -> GpuSettings:
        """The settings for one GPU, with `overrides` empty. index None: no `index:` override applies.

        Matching overrides are applied over the block from least to most
        specific (model, then index, then uuid; list order within a kind), so
        the most specific wins. Each override replaces whole settings: its
        clocks replace the block's clocks, they are not merged.
        """
        resolved: dict[str, Any] = {}
        matching = [o for o in self.overrides if o.matches(index, uuid, name)]
        for override in sorted(matching, key=lambda o: o.specificity):  # stable: list order kept
            resolved.update({k: getattr(override, k) for k in TUNING_KEYS if getattr(override, k) is not None})
        return self.model_copy(update={**resolved, "overrides": []})


# --- driver, nccl, launcher, slurm -------------------------------------------------------------------

DRIVER_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]*(\{branch\}[a-z0-9+.-]*)?$")  # a Debian name; {branch} once
APT_SOURCE_LINE = re.compile(r"^deb (\[[^]\[]*\] )?\S+ \S+( \S+)*$")  # sources.list one-line style


class DriverSettings(Block):
    """The NVIDIA driver every host of the block runs: one pinned version from one package source
    (provision/capabilities/driver/packages.py names the packages per distribution)."""

    version: str | None = setting(None, 'dotted digits in quotes, e.g. "580.159.04"',
                                  "quote it: YAML reads 580.65 as a number", pattern=r"^\d+(\.\d+)+$")
    branch: str | None = setting(None, 'a driver branch in quotes, e.g. "580"', "quote it", pattern=r"^\d+$")
    source: Literal["distro", "cuda", "local"] = setting(
        "distro", "distro, cuda or local", "distro: the host's configured apt sources; cuda: NVIDIA's CUDA "
        "repository (cuda-keyring installed); local: the apt source line in `repository`")
    repository: str | None = setting(None, 'an apt source line, e.g. "deb [trusted=yes] http://mirror.lan/nvidia ./"',
                                     "with source: local; written to /etc/apt/sources.list.d/provision-nvidia.list")
    packages: list[str] | None = setting(
        None, 'Debian package names; "{branch}" is replaced, e.g. ["nvidia-headless-{branch}-server", '
        '"nvidia-utils-{branch}-server"]', "default: from the distribution, source and flavour")
    headless: bool = setting(True, "true or false", "true: compute only, no X (nvidia-headless + nvidia-utils)")
    server: bool = setting(False, "true or false", "Ubuntu's -server packages (the datacenter branches)")
    open: bool = setting(False, "true or false", "the open kernel modules (Turing and newer only; not for V100)")
    hold: bool = setting(True, "true or false", "apt-mark hold the packages, so no upgrade moves the version")
    blacklist_nouveau: bool = setting(True, "true or false",
                                      "keep nouveau off the GPUs (modprobe.d file, initramfs rebuilt)")

    @field_validator("packages")
    @classmethod
    def _package_names(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise refuse("an empty list installs nothing", "leave packages out for the default names")
        for name in value or []:
            if not DRIVER_PACKAGE.match(name):
                raise refuse(f"{name!r} is not a Debian package name",
                             'lower-case letters, digits, + . -, and at most one "{branch}"')
        return value

    @field_validator("repository")
    @classmethod
    def _source_line(cls, value: str | None) -> str | None:
        if value is not None and not APT_SOURCE_LINE.match(value):
            raise refuse(f"{value!r} is not a one-line apt source", 'e.g. "deb [trusted=yes] file:/srv/nvidia ./"')
        return value

    @model_validator(mode="after")
    def _one_driver(self) -> DriverSettings:
        if self.version is None and self.branch is None:
            raise refuse("give the driver to install: version (exact) or branch",
                         'e.g. version: "580.159.04"; a branch alone takes whatever its packages hold')
        if self.version and self.branch and self.version.split(".")[0] != self.branch:
            raise refuse(f"version {self.version} is not on branch {self.branch}", "leave one of them out")
        if (self.source == "local") != (self.repository is not None):
            raise refuse("source: local takes the apt source line in `repository`, and only it does",
                         "source: local with repository: \"deb [trusted=yes] http://mirror.lan/nvidia ./\"")
        return self

    @property
    def wanted_branch(self) -> str:
        return self.branch or self.version.split(".")[0]


NcclLevel = Literal["LOC", "NVL", "PIX", "PXB", "PHB", "SYS"]
LEVEL_ALLOWED = "LOC, NVL, PIX, PXB, PHB or SYS"


# NCCL reads nccl.conf without quoting and the env file is single-quoted for sh: a value that holds none of
# these means the same in both, and nothing in it can run (`ens803f0;reboot` stays text, and is refused anyway).
UNSAFE_IN_VALUES = re.compile(r"['\"\\`$\s]")
IFNAME_ITEM = re.compile(r"^[A-Za-z0-9_.@-]+(:[0-9]+)?$")  # a Linux interface name (what real ones use), ":port"
HCA_ITEM = re.compile(r"^[A-Za-z0-9_.-]+(:[0-9]+){0,3}$")  # <hca>[:<port>[:<rail>[:<plane>]]]


def _list_items(value: str) -> list[str]:
    """The items of an NCCL list value (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) without its ^ and = marks."""
    return re.sub(r"^\^?=?", "", value).split(",")


class NcclSettings(Block):
    socket_ifname: str | None = setting(
        None, 'comma-separated interface prefixes, optionally starting with "^" (exclude) and/or "=" (exact)',
        "e.g. ens803f or =ens803f0,ens803f1 or ^docker,lo")
    ib_disable: bool | None = setting(None, "true or false")
    ib_hca: str | None = setting(None, "HCA names as NCCL_IB_HCA takes them, e.g. =mlx5_0:1,mlx5_1:1")
    socket_nthreads: int | None = setting(None, "an integer 1..16", ge=1, le=16)
    nsocks_perthread: int | None = setting(None, "an integer 1..64", ge=1, le=64)
    debug: Literal["VERSION", "WARN", "INFO", "TRACE"] | None = setting(None, "VERSION, WARN, INFO or TRACE")
    p2p_level: NcclLevel | None = setting(None, LEVEL_ALLOWED)
    net_gdr_level: NcclLevel | None = setting(None, LEVEL_ALLOWED)
    env: EnvVars = setting({}, "a mapping of NCCL_* variable names to values")
    conf_path: AbsolutePath = setting("/etc/nccl.conf", "an absolute path")
    env_file: AbsolutePath = setting("/etc/provision/nccl.env", "an absolute path")
    expected_link_speed_mbps: PositiveInt | None = setting(
        None, "Mb/s, an integer > 0 (10 GbE: 10000)", "each interface NCCL will use must run at this speed")
    allow_mixed_speeds: bool = setting(
        False, "true or false", "NCCL spreads traffic evenly over its interfaces: the slowest sets the pace")
    require_nic_within: Literal["PIX", "PXB", "PHB", "NODE", "SYS"] | None = setting(
        None, "PIX, PXB, PHB, NODE or SYS", "verify: every GPU has an RDMA NIC this close (nvidia-smi topo -m)")

    # The typed keys and the variables they write; env holds the others.
    VARIABLES: ClassVar[dict[str, str]] = {
        "socket_ifname": "NCCL_SOCKET_IFNAME", "ib_disable": "NCCL_IB_DISABLE", "ib_hca": "NCCL_IB_HCA",
        "socket_nthreads": "NCCL_SOCKET_NTHREADS", "nsocks_perthread": "NCCL_NSOCKS_PERTHREAD",
        "debug": "NCCL_DEBUG", "p2p_level": "NCCL_P2P_LEVEL", "net_gdr_level": "NCCL_NET_GDR_LEVEL"}

    def variables(self) -> dict[str, str]:
        """NCCL_* name -> value, as the files hold them: the typed keys set, then env, by name."""
        typed = {name: getattr(self, key) for key, name in self.VARIABLES.items() if getattr(self, key) is not None}
        typed = {name: ("1" if v else "0") if isinstance(v, bool) else str(v) for name, v in typed.items()}
        return dict(sorted({**typed, **self.env}.items()))

    @field_validator("socket_ifname")
    @classmethod
    def _ifname_syntax(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not all(IFNAME_ITEM.match(item) for item in _list_items(value)):
            raise refuse(f"{value!r} is not NCCL_SOCKET_IFNAME syntax: comma-separated interface names or "
                         "prefixes (letters, digits, . _ - @), no spaces or empty items, optionally starting "
                         'with "^" (exclude) and/or "=" (exact names)', "e.g. ens803f or =ens803f0,ens803f1")
        if len(value) < 2:
            raise refuse(f"{value!r}: NCCL ignores a value shorter than 2 characters and picks interfaces itself",
                         "write the interface name or a longer prefix")
        return value

    @field_validator("ib_hca")
    @classmethod
    def _hca_syntax(cls, value: str | None) -> str | None:
        if value is not None and not all(HCA_ITEM.match(item) for item in _list_items(value)):
            raise refuse(f"{value!r} is not NCCL_IB_HCA syntax: comma-separated <hca>[:<port>] items, "
                         'optionally starting with "^" (exclude) and/or "=" (exact names)', "e.g. =mlx5_0:1,mlx5_1:1")
        return value

    @field_validator("env")
    @classmethod
    def _known_nccl_variables(cls, value: dict[str, str]) -> dict[str, str]:
        others = [k for k in value if not k.startswith("NCCL_")]
        if others:
            raise refuse(f"{', '.join(others)}: nccl.env holds NCCL_* variables only",
                         "put other variables under launcher.env")
        typed = {name: key for key, name in cls.VARIABLES.items()}
        for name, text in value.items():
            if name in typed:
                raise refuse(f"{name}: set it as nccl.{typed[name]} (checked against each node), not in nccl.env")
            if name not in nccl_variables.KNOWN:
                hint = did_you_mean(name, sorted(nccl_variables.KNOWN))
                raise refuse(f"{name} is not a variable NCCL reads", (hint + " " if hint else "") +
                             "(a name newer than provision's list: set it in launcher.env)")
            if UNSAFE_IN_VALUES.search(text):
                raise refuse(f"{name}={text!r}: quotes, backslashes, $, backticks and spaces are not allowed "
                             "in NCCL values (nccl.conf has no quoting)")
        return value

    @model_validator(mode="after")
    def _socket_limit(self) -> NcclSettings:
        threads, socks = self.socket_nthreads, self.nsocks_perthread
        if threads is not None and socks is not None and threads * socks > NCCL_MAX_SOCKETS:
            raise refuse(f"socket_nthreads x nsocks_perthread = {threads} x {socks} = {threads * socks}: "
                         f"NCCL allows at most {NCCL_MAX_SOCKETS} (NCCL docs, NCCL_NSOCKS_PERTHREAD)",
                         "lower one of them")
        return self


ProcessCount = or_words(PositiveInt, "auto", "gpu", number="a number of processes")
SHELL_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")  # goes into a script unquoted-safe: no quoting needed
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SLURM_WORD = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


class LauncherSettings(Block):
    """The torchrun wrapper: the hosts of `group` form one training cluster."""

    group: str | None = setting(None, "a group of this inventory (default: the host's innermost group)")
    nproc_per_node: ProcessCount = setting("gpu", 'an integer > 0, "auto" or "gpu" (one process per GPU)')
    rdzv_backend: Literal["c10d", "static"] = setting("c10d", "c10d or static")
    rdzv_port: Port = setting(29400, "a port, 1..65535")
    master_port: Port = setting(29500, "a port, 1..65535", "used with rdzv_backend: static")
    torchrun: str = setting("torchrun", "a command on PATH or an absolute path, e.g. /opt/venv/bin/torchrun",
                            pattern=SHELL_WORD.pattern)
    options: list[str] = setting([], 'a list of torchrun options, e.g. ["--max-restarts=3"]')
    wrapper_path: AbsolutePath | None = setting(None, "an absolute path (default /usr/local/bin/GROUP-torchrun)")
    env: EnvVars = setting({}, "a mapping of variable names to values, exported by the wrapper")

    @field_validator("options")
    @classmethod
    def _torchrun_options(cls, value: list[str]) -> list[str]:
        for option in value:
            if not option.startswith("--") or not SHELL_WORD.match(option):
                raise refuse(f"{option!r} is not a torchrun option: --name or --name=value, with no spaces, "
                             "quotes or shell characters", 'e.g. ["--max-restarts=3", "--monitor-interval=5"]')
            if re.match(r"--(nnodes|nproc[-_]per[-_]node|rdzv[-_](backend|endpoint|id)|node[-_]rank|"
                        r"master[-_](addr|port))\b", option):
                raise refuse(f"{option!r}: the wrapper sets this from the inventory",
                             "use the launcher keys (nproc_per_node, rdzv_backend, rdzv_port, master_port)")
        return value

    @field_validator("env")
    @classmethod
    def _shell_safe_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not ENV_NAME.match(name):
                raise refuse(f"{name!r} is not a variable name", "letters, digits and _, not starting with a digit")
            if UNSAFE_IN_VALUES.search(text):
                raise refuse(f"{name}={text!r}: quotes, backslashes, $, backticks and spaces are not allowed")
        return value


class SlurmSettings(Block):
    """One Slurm cluster: every host whose slurm block names the same controller."""

    controller: str | None = setting(None, "a host name from this inventory (where slurmctld runs)")
    role: Literal["controller", "compute", "both"] | None = setting(
        None, "controller, compute or both", "default: controller on the controller host, compute elsewhere")
    cluster_name: str = setting("cluster", "lower-case letters, digits, _ . -", pattern=SLURM_WORD.pattern)
    partition: str | None = setting(None, "a partition name (default: the host's innermost group)",
                                    pattern=r"^[A-Za-z0-9_.-]+$")
    gpu_type: str | None = setting(None, "a gres type: lower-case letters, digits, _ . - (default from the GPU "
                                   "name: v100, rtx3090, h100)", pattern=SLURM_WORD.pattern)
    gres_autodetect: Literal["nvml", "nvidia", "off"] = setting(
        "off", "nvml, nvidia or off", "nvml needs slurmd built with NVML (Debian: slurm-wlm-nvml-plugin)")
    conf_dir: AbsolutePath = setting("/etc/slurm", "an absolute path")
    health_check_interval: int | None = setting(
        None, "seconds, 10..86400", "slurmd runs `provision verify --local` on each node this often: a node that "
        "fails is drained, and resumed once it passes", ge=10, le=86400)
    provision_command: str = setting("provision", "provision on the nodes: a command on PATH or an absolute path",
                                     pattern=SHELL_WORD.pattern)

    def role_of(self, host_name: str) -> str:
        return self.role or ("controller" if host_name == self.controller else "compute")


class HostSettings(Block):
    """Everything an inventory says a host should be. A block left out is None."""

    gpu: GpuSettings | None = setting(None, "a mapping (see the gpu block)")
    driver: DriverSettings | None = setting(None, "a mapping (see the driver block)")
    nccl: NcclSettings | None = setting(None, "a mapping (see the nccl block)")
    launcher: LauncherSettings | None = setting(None, "a mapping (see the launcher block)")
    slurm: SlurmSettings | None = setting(None, "a mapping (see the slurm block)")
    custom: dict = setting({}, "any mapping (not validated)")


BLOCKS = tuple(HostSettings.model_fields)


# --- settings as the inventory writes them -------------------------------------------------------------

def yaml_words(value: Any) -> str:
    """A setting as the inventory writes it, YAML flow style: 200, {mem: 877, sm: 1005}, {sm: [210, 2520]}."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_words(v)}" for k, v in value.items()
                               if v is not None and not (k == "nearest" and v is False)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_words(v) for v in value) + "]"
    return number_or_word(value)


def number_or_word(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# --- pydantic errors -> Problems -----------------------------------------------------------------------

def parse_host_settings(raw: dict, file: str, where: str,
                        partial: bool = False) -> tuple[HostSettings | None, list[Problem]]:
    """Validate the typed blocks and `custom` of one host, group or merged host.

    raw holds only those keys (connection and ansible_* variables are the
    inventory's business). With partial=True (the blocks one group or host
    writes, which the merge may still complete) a required key that is missing
    from a mapping is not a problem; the settings may then be None without
    problems. Returns (settings or None, problems).
    """
    try:
        return HostSettings.model_validate(raw), []
    except ValidationError as exc:
        return None, validation_problems(exc, HostSettings, file, where, partial)


def validation_problems(exc: ValidationError, model: type[BaseModel], file: str, where: str,
                        partial: bool = False) -> list[Problem]:
    """Translate pydantic's errors for `model` into Problems, one per key (the first error said about it)."""
    problems: dict[str, Problem] = {}
    for error in exc.errors():
        path = [p for p in error["loc"] if not (isinstance(p, str) and p.startswith("["))]  # or_words tags
        # A merge may still complete a mapping, but not a list entry: missing there is final.
        if partial and error["type"] == "missing" and not any(isinstance(p, int) for p in path):
            continue
        problem = _problem(error, path, model, file, where)
        problems.setdefault(problem.key, problem)
    return list(problems.values())


def _problem(error: dict, path: list, model: type[BaseModel], file: str, where: str) -> Problem:
    key, field, parent = _locate(model, path)
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "provision":
        return Problem(file, where, key, ctx["message"], ctx.get("hint", ""))
    if kind == "extra_forbidden":
        known = list(parent.model_fields) if parent else []
        return Problem(file, where, key, f"unknown key {path[-1]!r}",
                       did_you_mean(str(path[-1]), known) or f"known keys: {', '.join(known)}")
    allowed = field.description or "" if field is not None else ""
    hint = (field.json_schema_extra or {}).get("hint", "") if field is not None else ""
    if kind == "missing":
        return Problem(file, where, key, f"required, missing; allowed: {allowed}", hint)
    if kind == "literal_error" and isinstance(error["input"], str):
        hint = did_you_mean(error["input"], re.findall(r"'([^']*)'", ctx.get("expected", ""))) or hint
    what = f"key {error['input']!r}" if "[key]" in error["loc"] else _short(error["input"])
    message = error["msg"][0].lower() + error["msg"][1:]
    if kind in ("model_type", "dict_type"):
        message = "expected a mapping"  # not pydantic's "or instance of GpuSettings"
    if kind == "string_pattern_mismatch":
        message = "not allowed here"  # the allowed text says it in words; the regex would not help
    return Problem(file, where, key, f"got {what}: {message}" + (f"; allowed: {allowed}" if allowed else ""), hint)


def _locate(model: type[BaseModel], path: list) -> tuple[str, Any, type[BaseModel] | None]:
    """Follow an error path through the models: (dotted key, the last field passed, the model holding the last part)."""
    key, field, parent, annotation = "", None, None, model
    for part in path:
        if isinstance(part, int):
            key += f"[{part}]"
            continue
        parent = _model_in(annotation)
        found = parent.model_fields.get(part) if parent else None
        if found is None and parent is None and not _has_dict(annotation):
            continue  # the name of a union member, like 'int' in `int | float`
        field, annotation = (found, found.annotation) if found else (field, None)
        key += f".{part}" if key else str(part)
    return key, field, parent


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class inside an annotation like `list[GpuOverride]` or `ClockSettings | "default" | None`."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, get_args(annotation)) if m is not None), None)


def _has_dict(annotation: Any) -> bool:
    return annotation is dict or get_origin(annotation) is dict or any(map(_has_dict, get_args(annotation)))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def did_you_mean(name: str, known: list[str]) -> str:
    """'did you mean X?' for a likely typo of one of `known` (any case), else ''."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"did you mean {by_lower[close[0]]!r}?" if close else ""

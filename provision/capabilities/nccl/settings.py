"""The nccl block of the inventory: the interfaces and variables NCCL gets, and what they must be."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import field_validator, model_validator

from provision.core.settings import (UNSAFE_IN_VALUES, AbsolutePath, PATH_RULE, Block, EnvVars, PositiveInt,
                                     did_you_mean, refuse, setting)
from provision.capabilities.nccl import variables as nccl_variables


NCCL_MAX_SOCKETS = 64  # NCCL docs (NCCL_NSOCKS_PERTHREAD): threads x sockets per thread cannot exceed 64


NcclLevel = Literal["LOC", "NVL", "PIX", "PXB", "PHB", "SYS"]


LEVEL_ALLOWED = "LOC, NVL, PIX, PXB, PHB or SYS"


# NCCL reads nccl.conf without quoting and the env file is single-quoted for sh: a value that holds none of
# these means the same in both, and nothing in it can run (`ens803f0;reboot` stays text, and is refused anyway).


IFNAME_ITEM = re.compile(r"^[A-Za-z0-9_.@-]+(:[0-9]+)?$")  # a Linux interface name (what real ones use), ":port"


HCA_ITEM = re.compile(r"^[A-Za-z0-9_.-]+(:[0-9]+){0,3}$")  # <hca>[:<port>[:<rail>[:<plane>]]]


def _list_items(value: str) -> list[str]:
    """The items of an NCCL list value (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) without its ^ and = marks."""
    return re.sub(r"^\^?=?", "", value).split(",")


class NcclSettings(Block):
    generic_fields: ClassVar[frozenset[str]] = frozenset({"conf_path", "env_file"})
    socket_ifname: str | None = setting(
        None, 'comma-separated interface prefixes, optionally starting with "^" (exclude) and/or "=" (exact)',
        "e.g. ens803f or =ens803f0,ens803f1 or ^docker,lo", examples=["ens803f"])
    ib_disable: bool | None = setting(None, "true or false")
    ib_hca: str | None = setting(None, "HCA names as NCCL_IB_HCA takes them, e.g. =mlx5_0:1,mlx5_1:1",
                                 examples=["=mlx5_0:1,mlx5_1:1"])
    socket_nthreads: int | None = setting(None, "an integer 1..16", ge=1, le=16, examples=[4])
    nsocks_perthread: int | None = setting(None, "an integer 1..64", ge=1, le=64, examples=[4])
    debug: Literal["VERSION", "WARN", "INFO", "TRACE"] | None = setting(None, "VERSION, WARN, INFO or TRACE",
                                                                        examples=["WARN"])
    p2p_level: NcclLevel | None = setting(None, LEVEL_ALLOWED, examples=["NVL"])
    net_gdr_level: NcclLevel | None = setting(None, LEVEL_ALLOWED, examples=["PHB"])
    env: EnvVars = setting({}, "a mapping of NCCL_* variable names to values", examples=[{"NCCL_IB_TIMEOUT": "22"}])
    conf_path: AbsolutePath = setting("/etc/nccl.conf", PATH_RULE)
    env_file: AbsolutePath = setting("/etc/provision/nccl.env", PATH_RULE)
    expected_link_speed_mbps: PositiveInt | None = setting(
        None, "Mb/s, an integer > 0 (10 GbE: 10000)", "each interface NCCL will use must run at this speed",
        examples=[100000])
    allow_mixed_speeds: bool = setting(
        False, "true or false", "NCCL spreads traffic evenly over its interfaces: the slowest sets the pace")
    require_nic_within: Literal["PIX", "PXB", "PHB", "NODE", "SYS"] | None = setting(
        None, "PIX, PXB, PHB, NODE or SYS", "verify: every GPU has an RDMA NIC this close (nvidia-smi topo -m)")
    expected_ib_rate_gbps: float | None = setting(
        None, "Gb/s, a number > 0 (4X EDR: 100, 4X HDR: 200, 4X NDR: 400)",
        "verify: each RDMA port NCCL may use runs at least this fast (/sys/class/infiniband/*/ports/*/rate)", gt=0,
        examples=[400])

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
            raise refuse(f"{', '.join(others)}: provision_nccl.env holds NCCL_* variables only",
                         "put other variables under provision_launcher.env")
        typed = {name: key for key, name in cls.VARIABLES.items()}
        for name, text in value.items():
            if name in typed:
                raise refuse(f"{name}: set it as provision_nccl.{typed[name]} (checked against each node), not in provision_nccl.env")
            if name not in nccl_variables.KNOWN:
                hint = did_you_mean(name, sorted(nccl_variables.KNOWN))
                raise refuse(f"{name} is not a variable NCCL reads", (hint + " " if hint else "") +
                             "(a name newer than provision's list: set it in provision_launcher.env)")
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

"""The driver block of the inventory: which NVIDIA driver, from where, pinned how."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import field_validator, model_validator

from provision.core.settings import (Block, refuse, setting)


DRIVER_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]*(\{branch\}[a-z0-9+.-]*)?$")  # a Debian name; {branch} once


# sources.list's one-line style (sources.list(5)): deb [option=value ...] URI SUITE [COMPONENT...], each part in
# plain words: the line is written verbatim into the node's apt sources. $(ARCH) is apt's own variable.
_APT_WORD = r"(?:[A-Za-z0-9_./+~:@%=,-]|\$\(ARCH\))+"
_APT_OPTION = rf"[A-Za-z][A-Za-z0-9-]*[+-]?={_APT_WORD}"
APT_SOURCE_LINE = re.compile(rf"^deb (\[{_APT_OPTION}( {_APT_OPTION})*\] )?"
                             rf"[a-z][a-z0-9+.-]*:{_APT_WORD}( {_APT_WORD})+$")


class DriverSettings(Block):
    """The NVIDIA driver every host of the block runs: one pinned version from one package source
    (provision/capabilities/driver/packages.py names the packages per distribution)."""

    version: str | None = setting(None, 'dotted digits in quotes, e.g. "580.159.04"',
                                  "quote it: YAML reads 580.65 as a number", pattern=r"^\d+(\.\d+)+$",
                                  examples=["580.159.04"])
    branch: str | None = setting(None, 'a driver branch in quotes, e.g. "580"', "quote it", pattern=r"^\d+$",
                                 examples=["580"])
    source: Literal["distro", "cuda", "local"] = setting(
        "distro", "distro, cuda or local", "distro: the host's configured apt sources; cuda: NVIDIA's CUDA "
        "repository (cuda-keyring installed); local: the apt source line in `repository`")
    repository: str | None = setting(None, 'an apt source line, e.g. "deb [trusted=yes] http://mirror.lan/nvidia ./"',
                                     "with source: local; written to /etc/apt/sources.list.d/provision-nvidia.list",
                                     examples=["deb [trusted=yes] http://mirror.lan/nvidia ./"])
    packages: list[str] | None = setting(
        None, 'Debian package names; "{branch}" is replaced, e.g. ["nvidia-headless-{branch}-server", '
        '"nvidia-utils-{branch}-server"]', "default: from the distribution, source and flavour",
        examples=[["nvidia-headless-{branch}-server", "nvidia-utils-{branch}-server"]])
    headless: bool = setting(True, "true or false", "true: compute only, no X (nvidia-headless + nvidia-utils)")
    server: bool = setting(False, "true or false", "Ubuntu's -server packages (the datacenter branches)")
    open: bool = setting(False, "true or false", "the open kernel modules (Turing and newer only; not for V100)")
    hold: bool = setting(True, "true or false", "apt-mark hold the packages, so no upgrade moves the version")
    blacklist_nouveau: bool = setting(True, "true or false",
                                      "keep nouveau off the GPUs (modprobe.d file, initramfs rebuilt)")
    peermem: bool | Literal["auto"] = setting(
        "auto", "auto, true or false", "nvidia-peermem (GPUDirect RDMA's peer-memory module) loaded now and at every "
        "boot (modules-load.d); auto: where NCCL would use an RDMA NIC close enough to a GPU for GPUDirect RDMA "
        "(provision_nccl, nvidia-smi topo -m) and the kernel offers no DMA-BUF for it; false: left alone")
    fabric_manager: Literal["auto"] | bool = setting(
        "auto", "auto, true or false", "NVIDIA Fabric Manager (NVSwitch boards: HGX/DGX A100, H100, H200) and "
        "libnvidia-nscq at the driver's exact version, held, the service enabled: auto: where the host has NVSwitches; "
        "true: required (refused on a board without them); false: left alone")
    container_toolkit: str | None = setting(
        None, 'a toolkit version in quotes, e.g. "1.17.8"', "nvidia-container-toolkit, -base, libnvidia-container-tools "
        "and libnvidia-container1 at it, held; the CDI spec regenerated for the loaded driver; docker and containerd, "
        "where installed, configured for the nvidia runtime", pattern=r"^\d+(\.\d+)+$", examples=["1.17.8"])
    dcgm: str | None = setting(
        None, 'a DCGM version in quotes, e.g. "4.2.3"', "DCGM 3: datacenter-gpu-manager; DCGM 4: "
        "datacenter-gpu-manager-4-core and -4-cudaNN, NN the driver's CUDA major; held, nvidia-dcgm started",
        pattern=r"^\d+(\.\d+)+$", examples=["4.2.3"])

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
            raise refuse(f"{value!r} is not a one-line apt source: deb [option=value ...] URI SUITE [COMPONENT ...], "
                         "in letters, digits and _ . / + ~ : @ % = , - (no quotes, spaces inside a part or shell "
                         "characters)", 'e.g. "deb [trusted=yes] file:/srv/nvidia ./"')
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
        if self.branch:
            return self.branch
        assert self.version is not None  # _one_driver: a version or a branch
        return self.version.split(".")[0]

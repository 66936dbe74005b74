"""The gpu block's `mig`: "disabled", or a layout, the GPU instance profiles by name as the driver lists them
(`nvidia-smi mig -lgip`), each GPU instance with its default compute instance (nvidia-smi's -C).

Only the names' form is checked when the inventory is read; whether a GPU has those profiles and whether the
layout fits its memory slices is its facts' question (mig_fit.py), answered before any host is touched.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import AfterValidator

from provision.core.settings import or_words, refuse

DISABLED = "disabled"
# "3g.71gb", "1g.18gb+me", "1g.24gb+gfx", "1g.18gb+me.all", "1g.24gb-me": slices, memory, then the driver's suffixes.
PROFILE_NAME = re.compile(r"[1-9][0-9]*g\.[0-9]+gb(?:[+-][a-z][a-z0-9.]*)*")
NAMES_HINT = "profile names as `nvidia-smi mig -lgip` lists them, without its \"MIG \": e.g. [\"3g.71gb\", \"3g.71gb\"]"
ALLOWED = f'"{DISABLED}", or a list of GPU instance profile names (e.g. ["3g.71gb", "3g.71gb"]; [] for none)'


def _profile_name(value: str) -> str:
    name = value.strip()
    if name.upper().startswith("MIG "):
        raise refuse(f"{value!r}: write the profile name without nvidia-smi's \"MIG \"", f"write {name[4:].strip()!r}")
    if not PROFILE_NAME.fullmatch(name):
        raise refuse(f"{value!r} is not a GPU instance profile name", NAMES_HINT)
    return name


ProfileName = Annotated[str, AfterValidator(_profile_name)]

if TYPE_CHECKING:
    MigSetting = Union[list[str], Literal["disabled"]]
else:
    MigSetting = or_words(list[ProfileName], DISABLED)


def layout_of(setting: object) -> list[str] | None:
    """The profile names a `mig` value asks for; None where it asks for MIG off (or says nothing)."""
    return list(setting) if isinstance(setting, list) else None

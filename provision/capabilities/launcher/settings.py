"""The launcher block of the inventory: the torchrun wrapper and the sbatch script it writes."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar, Literal, Union

from pydantic import field_validator

from provision.core.settings import (PATH_RULE, SHELL_WORD, UNSAFE_IN_VALUES, AbsolutePath, Block, Command,
                                     EnvVars, Port, PositiveInt, or_words, refuse, setting)


if TYPE_CHECKING:  # what it validates to (mypy cannot run or_words)
    ProcessCount = Union[int, Literal["auto", "gpu"]]
else:
    ProcessCount = or_words(PositiveInt, "auto", "gpu", number="a number of processes")




ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class LauncherSettings(Block):
    """The torchrun wrapper: the hosts of `group` form one training cluster."""

    generic_fields: ClassVar[frozenset[str]] = frozenset({"master_port", "wrapper_path"})

    group: str | None = setting(None, "a group of this inventory (default: the host's innermost group)",
                                examples=["trainers"])
    nproc_per_node: ProcessCount = setting("gpu", 'an integer > 0, "auto" or "gpu" (one process per GPU)')
    rdzv_backend: Literal["c10d", "static"] = setting("c10d", "c10d or static")
    rdzv_port: Port = setting(29400, "a port, 1..65535")
    master_port: Port = setting(29500, "a port, 1..65535", "used with rdzv_backend: static")
    torchrun: Command = setting("torchrun", "a command on PATH or an absolute path, e.g. /opt/venv/bin/torchrun")
    options: list[str] = setting([], 'a list of torchrun options, e.g. ["--max-restarts=3"]',
                                 examples=[["--max-restarts=3"]])
    wrapper_path: AbsolutePath | None = setting(None, PATH_RULE + " (default /usr/local/bin/GROUP-torchrun)",
                                                examples=["/usr/local/bin/trainers-torchrun"])
    env: EnvVars = setting({}, "a mapping of variable names to values, exported by the wrapper",
                           examples=[{"OMP_NUM_THREADS": "8"}])

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

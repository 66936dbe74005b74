"""The `provision` program's entry point (and `python -m provision`'s): the command's modules are imported with
Python's cyclic garbage collector off, then frozen.

Importing them (click, Fabric, pydantic, jinja2 and provision's own) makes tens of thousands of objects, none of
them garbage, and the collector, which runs every 700 allocations, walked them again and again: 114 young, 10 middle
and 1 full collection, 57 ms by gc.callbacks; `provision --help` as a whole went from 0.56 to 0.39 s of CPU with it
off (farm-bench, 20 pairs in turn). Frozen (gc.freeze), what the imports made is never walked again: the
collections the command itself triggers walk only what it makes."""

from __future__ import annotations

import gc


def main() -> None:
    gc.disable()
    try:
        from provision.cli import main as command
    finally:
        gc.freeze()
        gc.enable()
    command(prog_name="provision")  # `python -m provision` says "Usage: provision ...", as the command does

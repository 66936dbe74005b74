"""The `provision` program's entry point (and `python -m provision`'s): the command's modules are imported with
Python's cyclic garbage collector off, then frozen.

Importing them (click, Fabric, pydantic, jinja2 and provision's own) makes tens of thousands of objects, none of
them garbage, and the collector, which runs every 700 allocations, walked them again and again: about 60 ms of the
start's 0.45 s (114 young, 10 middle and 1 full collection; gc.callbacks). Frozen (gc.freeze), what the imports made
is never walked again: the collections the command itself triggers walk only what it makes."""

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

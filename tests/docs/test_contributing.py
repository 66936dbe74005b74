"""CONTRIBUTING.md's layer diagrams are the import contracts of pyproject.toml, drawn: a contract changed
without its diagram (or the other way round) fails here."""

from __future__ import annotations

import tomllib

from docpages import REPO


def drawn(layers: list[str]) -> str:
    return " -> ".join(" | ".join(part.strip() for part in layer.split("|")) for layer in layers)


def test_each_layers_contract_is_drawn_in_contributing():
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = [c["layers"] for c in contracts if c["type"] == "layers"]
    diagrams = [line.strip() for line in (REPO / "CONTRIBUTING.md").read_text().splitlines()
                if line.startswith("    ") and " -> " in line]
    assert len(layered) == 2 and [drawn(layers) for layers in layered] == diagrams, diagrams

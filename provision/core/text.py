"""Small readers of the words commands print."""

from __future__ import annotations


def number(word: str) -> float | None:
    """A number as printed ("10000", "-1", "1732400000.123"); None for anything else ("", "-", "[N/A]")."""
    try:
        return float(word)
    except ValueError:
        return None

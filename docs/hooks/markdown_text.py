"""Text from the code put into Markdown as it reads there: `code` kept, the rest escaped (NCCL_* is no emphasis,
a | splits no table cell, <inactive> is no HTML tag)."""

from __future__ import annotations

import re

CODE_SPAN = re.compile(r"(`[^`]*`)")
SPECIAL = re.compile(r"([\\*_\[\]|])")


def escape(text: str) -> str:
    parts = CODE_SPAN.split(text)
    return "".join(part if CODE_SPAN.fullmatch(part) else
                   SPECIAL.sub(r"\\\1", part).replace("<", "&lt;").replace(">", "&gt;") for part in parts)


def sentence(text: str) -> str:
    """Text from the code as a sentence: one line, ending in a full stop. Not capitalised: it may open with a
    command's name (nvidia-smi) or a setting's."""
    text = " ".join(text.split())
    return text + ("" if text[-1:] in ("", ".", "!", "?") else ".")

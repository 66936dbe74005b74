"""The pages whose command blocks the tests run, in the order a reader meets them: the README, the docs
site (docs/: home, tutorial, how-to, reference, explanation, contributing; a page added there is among
them by itself), the benchmarks' README and CONTRIBUTING.md (the site includes it)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The site's nav order; a page under docs/ in none of these comes after them, by name.
SITE_ORDER = ("index.md", "tutorial", "how-to", "reference", "explanation", "contributing")


def _site_rank(page: Path) -> tuple[int, str]:
    relative = page.relative_to(REPO / "docs").as_posix()
    rank = next((i for i, top in enumerate(SITE_ORDER) if relative == top or relative.startswith(top + "/")),
                len(SITE_ORDER))
    return rank, relative


def pages() -> list[Path]:
    site = sorted((REPO / "docs").rglob("*.md"), key=_site_rank)
    return [REPO / "README.md", *site, REPO / "benchmarks" / "README.md", REPO / "CONTRIBUTING.md"]


def page_showing(text: str) -> str:
    """The text of the one page that shows `text` (a command line as its block indents it, an example)."""
    showing = [page for page in pages() if text in page.read_text()]
    assert len(showing) == 1, f"{len(showing)} pages show {text!r}: {[str(p.relative_to(REPO)) for p in showing]}"
    return showing[0].read_text()

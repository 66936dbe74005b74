"""Where the tests find the repository's own files, whatever folder a test module sits in."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
GPUSIM = REPO / "provision_lab" / "gpusim"
TEMPLATES = REPO / "templates"

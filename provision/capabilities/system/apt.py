"""apt-get and apt-mark as the tasks run them: never a prompt, never a pty, no recommends pulled in."""

from __future__ import annotations

APT_ENV = ["env", "DEBIAN_FRONTEND=noninteractive"]
APT_UPDATE = [*APT_ENV, "apt-get", "-q", "update"]
APT_INSTALL = [*APT_ENV, "apt-get", "-q", "-y", "-o", "Dpkg::Use-Pty=0", "install", "--no-install-recommends"]


def apt_mark(action: str, names: list[str]) -> list[str]:
    """apt-mark hold/unhold NAMES: held packages stay at their version through upgrades (unattended ones too)."""
    return ["apt-mark", action, *names]

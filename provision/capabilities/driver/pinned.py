"""Packages the driver block pins: the driver's own, and those beside it (fabric manager, the container toolkit,
DCGM). Each set is installed at one version in one apt-get, and held as provision_driver.hold says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from provision.capabilities.driver.facts import upstream
from provision.capabilities.system.apt import APT_INSTALL, APT_UPDATE, apt_mark
from provision.core.plan import OK, Change, Item, Plan

if TYPE_CHECKING:  # types only
    from collections.abc import Mapping
    from provision.capabilities.host import HostFacts


class Holds(Protocol):
    """A block that says whether its pinned packages are held: provision_driver, provision_slurm.containers."""

    @property
    def hold(self) -> bool: ...


@dataclass(frozen=True)
class Pin:
    """A set of packages at one upstream version."""

    what: str  # "container toolkit package"
    names: tuple[str, ...]
    version: str  # upstream: "1.17.8"
    apt_version: str  # what apt-get is asked for: "1.17.8-*" (any Debian revision), "1:4.2.3-*" (with the epoch)
    cause: str = ""  # the verify check that reports a difference (as_intended files its own under it)
    remove: tuple[str, ...] = ()  # packages of the same software under other names (another flavour), removed
    # Which installed (Debian) versions are the pin; None: those of upstream `version` exactly. The driver's
    # pin may be a branch ("branch 580": any 580.x).
    matches: Callable[[str], bool] | None = None

    def holds(self, debian_version: str | None) -> bool:
        """Is this installed version the pin?"""
        if debian_version is None:
            return False
        return self.matches(debian_version) if self.matches else upstream(debian_version) == self.version

    def misses(self, packages: Mapping[str, str | None], held: list[str], hold: bool) -> str | None:
        """What keeps the packages (installed name -> Debian version, those held) from being the pin; None when
        they are."""
        wrong = [f"{name} {packages.get(name) or 'not installed'}" for name in self.names
                 if not self.holds(packages.get(name))]
        if wrong:
            return f"not at {self.version}: {', '.join(wrong)}"
        others = [name for name in self.remove if packages.get(name)]
        if others:
            return f"{' '.join(others)} installed too"
        unheld = [name for name in self.names if name not in held]
        return f"installed but not held: {' '.join(unheld)}" if hold and unheld else None


def plan_pinned(plan: Plan, wanted: Holds, pin: Pin, facts: HostFacts) -> None:
    """Install (upgrade, downgrade) the packages at the pin in one apt-get, then hold them; or only (un)hold them."""
    have = {name: version for name in pin.names if (version := facts.packages.get(name))}
    others = [name for name in pin.remove if facts.packages.get(name)]
    if len(have) == len(pin.names) and all(pin.holds(v) for v in have.values()) and not others:
        plan.unchanged += [Item(name, OK, pin.what, after=version) for name, version in have.items()]
        plan_hold(plan, wanted, list(pin.names), facts)
    else:
        names = list(pin.names)
        plan.changes.append(Change(
            target=" ".join(names), what=f"{pin.what}s",
            before=", ".join(f"{name} {facts.packages.get(name)}" for name in [*have, *others]) or "not installed",
            after=pin.version,
            # One apt-get resolves all before it changes any: a version the repository lacks leaves the host as it was.
            # The other flavour's packages go in it (NAME-): apt never removes a held package to make room.
            # apt's lists refreshed once for every pinned set that moves in this run (Change.prepare).
            prepare=[APT_UPDATE],
            commands=[[*APT_INSTALL, "--allow-downgrades", "--allow-change-held-packages",
                       *(f"{name}={pin.apt_version}" for name in names), *(f"{name}-" for name in others)],
                      *([apt_mark("hold", names)] if wanted.hold else [])],
            verify=lambda fresh: pin.misses(fresh.packages, fresh.held, wanted.hold)))
    for change in plan.changes:
        change.cause = pin.cause


def plan_hold(plan: Plan, wanted: Holds, names: list[str], facts: HostFacts) -> None:
    """provision_driver.hold: every package held (apt-mark hold), so no upgrade moves it; false: none held."""
    action, off = ("hold", [n for n in names if n not in facts.held]) if wanted.hold else \
        ("unhold", [n for n in names if n in facts.held])
    if not off:
        plan.unchanged.append(Item(" ".join(names), OK, "apt hold", after="held" if wanted.hold else "not held"))
        return
    plan.changes.append(Change(
        target=" ".join(off), what="apt hold", before="not held" if wanted.hold else "held",
        after="held" if wanted.hold else "not held", commands=[apt_mark(action, off)],
        verify=lambda f: None if all((n in f.held) == wanted.hold for n in off)
        else f"apt-mark {action} did not take: {' '.join(off)}"))

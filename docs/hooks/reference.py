"""mkdocs hook (mkdocs.yml `hooks:`): a page's `<!-- reference: NAME -->` line becomes that reference, made from
the code at every build: the settings from HostSettings' models, the checks from the registry's check modules,
the exit codes from the commands' list. A setting without an example or a check without its Reads: and Next
step: lines fails the build, saying which."""

from __future__ import annotations

import re
from collections.abc import Callable

from mkdocs.exceptions import PluginError

import checks_page
import exit_codes_page
import settings_page

AS_INTENDED = "provision.verify.as_intended"  # verify's own check, run for every task after the registry's
MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.M)


def settings() -> str:
    from provision.capabilities.host import HostSettings

    return settings_page.markdown(HostSettings)


def checks() -> str:
    from provision.capabilities.host import HostSettings
    from provision.capabilities.registry import CHECKS

    named = [entry.anchor for entry in settings_page.settings(HostSettings)]
    return checks_page.markdown([*CHECKS, AS_INTENDED], named)


def exit_codes() -> str:
    from provision.commands.exit_codes import EXIT_CODES

    return exit_codes_page.markdown(EXIT_CODES)


REFERENCES: dict[str, Callable[[], str]] = {"settings": settings, "checks": checks, "exit-codes": exit_codes}


def expand(markdown: str) -> str:
    """The page with each marker replaced by its reference."""
    def reference(marker: re.Match) -> str:
        name = marker.group(1)
        if name not in REFERENCES:
            raise PluginError(f"<!-- reference: {name} -->: no such reference (known: {', '.join(REFERENCES)})")
        try:
            return REFERENCES[name]()
        except LookupError as exc:  # a setting without an example, a check without its lines
            raise PluginError(f"the {name} reference: {exc}") from exc

    return MARKER.sub(reference, markdown)


def on_page_markdown(markdown: str, **_: object) -> str:
    return expand(markdown)

"""The documentation site builds with `mkdocs build --strict`, and its reference pages hold what the code holds:
every setting of every block (walked here through pydantic's JSON schema, apart from the generator's own walk),
every check the registry lists with what it reads and its next step, every exit code, every command."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from mkdocs.exceptions import PluginError
from pydantic import ValidationError

from provision.capabilities.gpu.settings import GpuSettings
from provision.capabilities.host import HostSettings
from provision.capabilities.registry import CHECKS
from provision.commands.exit_codes import EXIT_CODES
from provision.core.settings import PREFIX, setting
from provision.verify.switch import check_names

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))  # the hook's modules import each other by name, as mkdocs loads them
import checks_page  # noqa: E402
import reference  # noqa: E402
import settings_page  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                           capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=120)
    assert built.returncode == 0, built.stderr[-3000:]
    return out


def page(site: Path, name: str) -> str:
    return (site / "reference" / name / "index.html").read_text()


def ids(text: str) -> set[str]:
    return {html.unescape(i) for i in re.findall(r'\bid="([^"]+)"', text)}


def schema_settings(schema: dict) -> list[str]:
    """The dotted path of every field, depth first in the models' order; a model met before is not walked again
    (its fields are listed where it was first met)."""
    defs, seen, found = schema["$defs"], set(), []

    def refs(node) -> list[str]:
        if isinstance(node, dict):
            return ([node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else []) + [r for v in node.values()
                                                                                  for r in refs(v)]
        return [r for v in node for r in refs(v)] if isinstance(node, list) else []

    def walk(properties: dict, path: str) -> None:
        for name, prop in properties.items():
            here = f"{path}.{name}" if path else PREFIX + name
            found.append(here)
            for ref in refs(prop):
                if ref not in seen:
                    seen.add(ref)
                    walk(defs[ref]["properties"], here)

    walk(schema["properties"], "")
    return found


def test_the_settings_page_has_every_field_of_every_block(site):
    expected = schema_settings(HostSettings.model_json_schema())
    assert "provision_gpu.clocks.mem" in expected and "provision_gpu.overrides.index" in expected
    assert not set(expected) - ids(page(site, "settings"))


def test_each_setting_shows_its_type_range_default_and_an_example_that_the_model_takes():
    entries = {s.anchor: s for s in settings_page.settings(HostSettings)}
    power = entries["provision_gpu.power_limit"]
    assert (power.type, power.default) == ('number or "default"', "not set")
    assert power.allowed == 'watts, > 0 and <= 1500, or "default"'
    assert power.example == "provision_gpu:\n  power_limit: 300"
    assert entries["provision_gpu.thermal_margin"].default == "`5`"
    assert entries["provision_gpu.clocks.mem"].default == "required"
    assert entries["provision_gpu.overrides.clocks"].sees == "provision_gpu.clocks"
    for entry in entries.values():
        assert entry.allowed, entry.name
        assert entry.example or len(entry.path) == 1 or entry.sees, entry.name  # a block's keys have theirs
    for entry in entries.values():
        if entry.example:
            assert field_problems(entry) == [], entry.name


def field_problems(entry) -> list[dict]:
    """What the model holding the setting says of its example, as the page writes it (YAML): its field's own
    validation, not the checks across keys (the driver block's version or branch, an override's one selector)."""
    value, model = yaml.safe_load(entry.example), HostSettings
    fields = [entry.path[0].removeprefix(PREFIX), *entry.path[1:]]  # provision_gpu is HostSettings' gpu
    for written, part in zip(entry.path[:-1], fields[:-1]):
        value = value[0] if part == settings_page.LIST_ITEM else value[written]
        if part != settings_page.LIST_ITEM:
            model = settings_page.model_in(model.model_fields[part].annotation)[0]
    name = fields[-1]
    try:
        model.__pydantic_validator__.validate_assignment(model.model_construct(), name, value[entry.path[-1]])
    except ValidationError as exc:
        return [error for error in exc.errors() if error["loc"][:1] == (name,)]
    return []


def test_a_setting_added_to_a_model_is_on_the_page_and_one_without_an_example_is_refused():
    class Tuned(GpuSettings):
        fan_floor: int | None = setting(None, "percent, 0..100", "the fans never turn slower", ge=0, le=100,
                                        examples=[40])

    class Host(HostSettings):
        gpu: Tuned | None = setting(None, "a mapping (see the gpu block)")

    text = settings_page.markdown(Host)
    assert "### `provision_gpu.fan_floor` { #provision_gpu.fan_floor }" in text
    assert "| integer | percent, 0..100 | not set |" in text
    assert "provision_gpu:\n  fan_floor: 40\n" in text

    class Unexampled(GpuSettings):
        fan_floor: int | None = setting(None, "percent, 0..100")

    class Bare(HostSettings):
        gpu: Unexampled | None = setting(None, "a mapping (see the gpu block)")

    with pytest.raises(LookupError, match=r"provision_gpu\.fan_floor: no example"):
        settings_page.markdown(Bare)


def test_the_checks_page_has_every_check_verify_runs_with_what_it_reads_and_its_next_step(site):
    shown = ids(page(site, "checks"))
    checks = {c.name.removesuffix("[TASK]"): c for c in checks_page.checks([*CHECKS, reference.AS_INTENDED])}
    assert list(checks) == check_names()  # the names provision_verify.skip takes, in the report's order
    for name, check in checks.items():
        assert name in shown, name
        assert check.reads and check.next_step, name
    assert 'href="../settings/#provision_gpu.count"' in page(site, "checks")  # a setting named links to its entry


def test_a_check_without_its_reads_line_fails_the_build_naming_it():
    def check_something(node):
        """Next step: fix it."""

    with pytest.raises(LookupError, match="check_something: its docstring needs Reads:"):
        checks_page.check_of(check_something, "provision.capabilities.foo.checks")


def test_a_docstring_splits_into_what_it_says_what_it_reads_and_the_next_step():
    about, said = checks_page.docstring_parts(
        "Width always; the generation at work.\n\nReads: one\nline and the next.\nNext step: reseat\nthe card")
    assert about == "Width always; the generation at work."
    assert said == {"reads": "one line and the next.", "next_step": "reseat the card"}


def test_the_exit_codes_page_has_every_code_with_its_meaning(site):
    text = html.unescape(re.sub(r"<[^>]+>", "", page(site, "exit-codes")))
    for record in EXIT_CODES:
        assert f"{record.code} {record.name} {record.meaning}" in " ".join(text.split()), record


def test_the_cli_page_has_every_command_the_lab_included(site):
    from provision.cli import main

    names = main.list_commands(click.Context(main))  # the lab's too: a plugin command, listed by the group
    assert "lab" in names
    assert {f"provision-{name}" for name in names} <= ids(page(site, "cli"))


def test_an_unknown_reference_marker_fails_the_build():
    with pytest.raises(PluginError, match="no such reference"):
        reference.expand("<!-- reference: settngs -->\n")

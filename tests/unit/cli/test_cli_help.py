"""Every command's --help, the lab's included: it fits an 80-column terminal, and it names only options the
command has (or those of the `provision X` command it shows). The shell completion the README shows works."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from provision.cli import main
from paths import REPO

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*[a-z]")
SHOWN_COMMAND = re.compile(r"provision ((?:lab )?[a-z]+)")


def every_command(command: click.Command = main, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):  # as --help lists them: `lab` is loaded only when asked for
            yield from every_command(command.get_command(ctx, name), (*path, name))


COMMANDS = dict(every_command())


def help_text(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(main, [*path, "--help"], env={"COLUMNS": "80"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def options_of(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def test_the_walk_finds_every_command_and_the_lab_ones():
    names = {" ".join(path) for path in COMMANDS}
    assert {"", "apply", "facts", "verify", "unlock", "clocks", "power", "persistence", "advise", "demo", "lab",
            "lab up", "lab down", "lab status", "lab reboot", "lab fault"} <= names


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda p: " ".join(p) or "provision")
def test_help_fits_80_columns(path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    too_long = [f"{len(line)}: {line}" for line in help_text(path).splitlines() if len(line) > 80]
    assert not too_long, "\n".join(too_long)


@pytest.mark.parametrize("path", list(COMMANDS), ids=lambda p: " ".join(p) or "provision")
def test_help_names_only_options_the_command_has(path):
    """facts once showed apply's exit codes, "8 --check only", and facts has no --check."""
    strays = []
    for line in help_text(path).splitlines():
        shown = SHOWN_COMMAND.search(line)
        target = tuple(shown.group(1).split()) if shown and tuple(shown.group(1).split()) in COMMANDS else path
        strays += [f"{option} ({' '.join(target)}): {line.strip()}" for option in OPTION.findall(line)
                   if option not in options_of(COMMANDS[target])]
    assert not strays, "\n".join(strays)


def test_the_shell_completion_the_readme_shows_works():
    readme = (REPO / "README.md").read_text()
    assert '`eval "$(_PROVISION_COMPLETE=bash_source provision)"`' in readme
    for shell, marker in (("bash_source", "complete -o nosort -F _provision_completion provision"),
                          ("zsh_source", "#compdef provision"),
                          ("fish_source", "complete --no-files --command provision")):
        result = CliRunner().invoke(main, [], prog_name="provision", env={"_PROVISION_COMPLETE": shell})
        assert result.exit_code == 0 and marker in result.output, (shell, result.output)
    # what the bash function asks for a word: the lab's commands too
    result = CliRunner().invoke(main, [], prog_name="provision", env={
        "_PROVISION_COMPLETE": "bash_complete", "COMP_WORDS": "provision lab f", "COMP_CWORD": "2"})
    assert result.output.split() == ["plain,fault"]


def test_no_command_but_lab_imports_the_lab():
    import subprocess
    import sys
    code = "import sys, provision.cli; print(sorted(m for m in sys.modules if m.startswith('provision_lab')))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_the_lab_command_is_the_one_its_entry_point_names():
    """provision names no lab module: `provision lab` is the package's entry point (pyproject.toml), found by name."""
    from importlib.metadata import entry_points

    from provision_lab.cli import lab

    [point] = entry_points(group="provision.commands", name="lab")
    assert point.value == "provision_lab.cli:lab"
    assert main.get_command(click.Context(main), "lab") is lab
    assert main.get_command(click.Context(main), "no-such-command") is None


@pytest.mark.parametrize("command", ["apply", "facts", "verify", "unlock"])
def test_every_host_command_takes_the_inventory_as_ansible_users_give_it(command, tmp_path):
    missing = str(tmp_path / "absent.yaml")
    for args in ([command, "-i", missing], [command, "--inventory", missing], [command, missing]):
        result = CliRunner().invoke(main, args, env={"COLUMNS": "80"})
        assert result.exit_code == 2 and f"{missing}: no such inventory file or directory" in result.output, (args, result.output)
    both = CliRunner().invoke(main, [command, missing, "-i", missing])
    assert both.exit_code == 2 and "give the inventory once" in both.output

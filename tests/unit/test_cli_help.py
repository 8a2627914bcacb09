"""Every command's --help renders (no markup in a help text breaks it) and exits 0.

rich reads help texts as markup: `HOST[:PORT][/PATH]` once made `goldenenv image push --help` a traceback
(`[/PATH]` is a closing tag), and a lower-case `[word]` is silently eaten as a style (`[name]` vanishes). So every
help text of every command, nested groups included, must read as plain text, and every --help must render.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from rich.markup import render
from typer.testing import CliRunner

from goldenenv.cli import app

REPO = Path(__file__).resolve().parents[2]
ROOT = typer.main.get_command(app)


def _is_group(command) -> bool:
    """A command group, by what it has: typer builds on its own copy of click (typer._click), so the click
    package's classes are not its commands' classes."""
    return isinstance(getattr(command, "commands", None), dict)


def _commands(group, prefix: tuple[str, ...] = ()):
    """Every command and subcommand, at any depth (goldenenv image push), hidden ones included."""
    for name, command in group.commands.items():
        yield (*prefix, name), command
        if _is_group(command):
            yield from _commands(command, (*prefix, name))


COMMANDS = {(): ROOT, **dict(_commands(ROOT))}


def _id(command: tuple[str, ...]) -> str:
    return " ".join(command) or "goldenenv"


def test_the_walk_reaches_every_group_and_subcommand():
    """Every group's commands are in the list (a walk that stopped at the top would miss `image push`)."""
    groups = [path for path, command in COMMANDS.items() if _is_group(command)]
    assert [path for path in groups if path], "the CLI has a named group (goldenenv image ...)"
    for path in groups:
        for name in COMMANDS[path].commands:
            assert (*path, name) in COMMANDS
    assert ("image", "push") in COMMANDS


def _help_texts(command) -> list[tuple[str, str]]:
    texts = [("help", command.help), ("short_help", command.short_help), ("epilog", command.epilog)]
    for param in command.params:
        texts += [(f"{param.name} help", getattr(param, "help", None)), (f"{param.name} metavar", param.metavar)]
    return [(what, text) for what, text in texts if text]


@pytest.mark.parametrize("command", COMMANDS, ids=_id)
def test_help_texts_are_plain_text_to_rich(command):
    """rich's markup reading leaves every help text as written: no closing tag it refuses, no `[word]` it eats.
    Brackets rich must not read are escaped (rich.markup.escape) or reworded."""
    for what, text in _help_texts(COMMANDS[command]):
        try:
            plain = render(text).plain
        except Exception as e:  # rich.errors.MarkupError
            pytest.fail(f"{_id(command)} {what}: rich cannot render {text!r}: {e}")
        assert plain == text.replace("\\[", "["), f"{_id(command)} {what}: rich reads markup in {text!r}"


@pytest.mark.parametrize("command", COMMANDS, ids=_id)
def test_help_renders(command):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Usage:" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", COMMANDS, ids=_id)
def test_dash_h_is_help_everywhere(command):
    """`-h` works wherever `--help` does, nested groups included (goldenenv image push -h): the same page, exit 0,
    never "No such option: -h"."""
    env = {"COLUMNS": "120"}
    short, long = (CliRunner().invoke(app, [*command, flag], env=env) for flag in ("-h", "--help"))
    assert short.exit_code == 0, short.output
    assert "No such option" not in short.output
    assert short.output == long.output


def test_image_push_help_renders_in_a_real_terminal_width():
    """The issue's own reproduction, through the installed entry point rather than the test runner."""
    result = subprocess.run([sys.executable, "-m", "goldenenv", "image", "push", "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "120"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--registry" in result.stdout and "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("scheduler", ["slurm", None])
def test_flow_help_names_every_phase_the_flow_runs(scheduler):
    """`flow --help` once spoke of train and drill while a Slurm stack (the local default) ran submit and drill: the
    help names each phase flow.phases runs, for a stack with Slurm and one without."""
    from goldenenv import flow

    text = " ".join(COMMANDS[("flow",)].help.split())
    assert all(name in text for name in flow.phases(scheduler)), (flow.phases(scheduler), text)
    assert flow.phases("slurm")[3:5] == ("submit", "drill") and flow.phases(None)[3:5] == ("train", "drill")

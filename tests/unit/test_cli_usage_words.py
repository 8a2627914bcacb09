"""A command line typed wrong is told in the project's words on every command: the flag, what was given, what to write.

`goldenenv submit --nodes x` once answered `Invalid value for '--nodes' / '-N': Input should be a valid integer,
unable to parse string as an integer` in a box, and a mistyped flag `No such option: --tail (Possible options:
--stack)`: typer's and pydantic's phrasing. The rule is held over every command and every typed flag, found by
walking the command tree, so a flag added tomorrow is held to it the day it is added.
"""

from __future__ import annotations

import enum

import pytest
import typer.main
from typer.testing import CliRunner

from goldenenv.cli import app
from goldenenv.cli.usage import what_to_write

ROOT = typer.main.get_command(app)
FOREIGN = ("Invalid value", "Input should", "No such option", "Possible options", "Missing option", "Missing argument",
           "requires an argument", "Got unexpected", "No such command", "Error", "╭", "unable to parse")
"""typer's, click's and pydantic's phrasing, and typer's error box."""


def _commands(group, prefix=()):
    for name, command in group.commands.items():
        yield (*prefix, name), command
        if isinstance(getattr(command, "commands", None), dict):
            yield from _commands(command, (*prefix, name))


def _typed(param) -> bool:
    desc = getattr(param, "type_descriptor", None)
    annotation = getattr(desc, "annotation", None)
    return annotation in (int, float) or (desc is not None and desc.choices is not None) or (
        isinstance(annotation, type) and issubclass(annotation, enum.Enum))


TYPED = [pytest.param(path, param, id=f"{' '.join(path)} {param.opts[0]}")
         for path, command in _commands(ROOT) if not isinstance(getattr(command, "commands", None), dict)
         for param in command.params if getattr(param, "param_type_name", "") == "option" and _typed(param)
         and param.opts[0].startswith("--")]


def _said(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, prog_name="goldenenv")
    return result.exit_code, result.output


def _ours(output: str, key: str) -> None:
    assert f"  {key}: " in output, output
    assert "write" in output or "drop it" in output or "did you mean" in output or "it takes" in output or "it has" in output, output
    assert not [w for w in FOREIGN if w in output], output


def test_the_walk_finds_the_typed_flags():
    """A walk that found nothing would pass every test below."""
    flags = {(" ".join(p.values[0]), p.values[1].opts[0]) for p in TYPED}
    assert len(flags) >= 8, flags
    assert {("submit", "--nodes"), ("health", "--hosts-by")} <= flags


@pytest.mark.parametrize("path, param", TYPED)
def test_a_flag_given_the_wrong_kind_of_value_is_told_what_to_write(path, param):
    code, output = _said([*path, param.opts[0], "x"])
    assert code == 2, output
    _ours(output, param.opts[0])
    assert "got 'x'" in output and what_to_write(param) in output, output


@pytest.mark.parametrize("args, key, says", [
    (["submit", "--nodes", "x", "train.py"], "--nodes", "got 'x'; write a whole number, such as 4"),
    (["submit", "-N", "x"], "--nodes", "got 'x'; write a whole number"),
    (["run", "--nproc-per-node=0"], "--nproc-per-node", "got '0'; write a whole number at least 1"),
    (["health", "--hosts-by", "ip"], "--hosts-by", "write one of: private-ip, instance-id"),
    (["logs", "--tail", "5"], "--tail", "goldenenv logs takes no such flag"),
    (["jobs", "--stak", "x"], "--stak", "did you mean --stack?"),
    (["submit"], "--nodes", "required; write a whole number"),
    (["init"], "FOLDER", "required"),
    (["drill", "--steps"], "--steps", "needs a value after it; write a whole number"),
    (["up", "extra"], "'extra'", "takes no more arguments"),
    (["bogus"], "'bogus'", "goldenenv has no such command; it has"),
    (["image", "bogus"], "'bogus'", "goldenenv image has no such command; it has build"),
])
def test_the_issues_cases_are_told_in_words(args, key, says):
    code, output = _said(args)
    assert code == 2, output
    _ours(output, key)
    assert says in " ".join(output.split()), output


def test_help_still_works_and_no_arguments_still_show_it():
    assert _said(["-h"])[0] == 0
    code, output = _said([])
    assert "Usage" in output and code in (0, 2), output

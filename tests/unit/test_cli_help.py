"""Every command's --help renders (no markup in a help text breaks it) and exits 0."""

from __future__ import annotations

import pytest
import typer.main
from typer.testing import CliRunner

from goldenenv.cli import app


def _commands(group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        yield (*prefix, name)
        if hasattr(command, "commands"):  # a command group (goldenenv image ...)
            yield from _commands(command, (*prefix, name))


COMMANDS = [()] + list(_commands(typer.main.get_command(app)))


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "goldenenv")
def test_help_renders(command):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output

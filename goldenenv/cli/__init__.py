"""`goldenenv` command line: the root `app` (its --cwd option and the project it finds), and the command groups.

Each command group is one module here, a Typer sub-app named `app`; adding a group is a new module and its name in
GROUPS. The stack lifecycle commands (stack.py) and estimate (estimate.py) are top-level commands: their sub-apps
have no name, so Typer merges their commands into the root (`goldenenv up`, not `goldenenv stack up`). The image
commands (images.py) are a named group: `goldenenv image build`. Shared options and helpers are in common.py.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

import typer
from rich.markup import escape

from goldenenv import project
from goldenenv.cli.common import errors, fail
from goldenenv.cli.usage import Group
from goldenenv.spec import ConfigError

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
"""`-h` is `--help` everywhere: click hands a context's help option names down to every subcommand's context."""
app = typer.Typer(help="Golden environments for GPU training clusters.", no_args_is_help=True, add_completion=False,
                  context_settings=HELP_OPTIONS, cls=Group)
"""Its class, Group, says a command line typed wrong (any command's) in the project's words."""


OUTSIDE_A_PROJECT = {"init", "estimate"}
"""Commands that need no project: they create one, or read only goldenenv's catalog."""


@app.callback()
def _group(ctx: typer.Context, cwd: Path = typer.Option(
        None, "--cwd", "-C", help="Run as if started in this folder: the project is the nearest one upward "
        "holding Pulumi.yaml, as for the Pulumi CLI.")) -> None:
    """Golden environments for GPU training clusters."""
    import os

    if cwd is not None:
        if not cwd.is_dir():
            errors.print(f"[bold red]--cwd {escape(str(cwd))}[/]: no such folder")
            raise typer.Exit(2)
        os.chdir(cwd)
    if ctx.invoked_subcommand in OUTSIDE_A_PROJECT:
        return
    try:
        project.use(project.find())
    except project.NoProject as e:
        errors.print(f"[bold red]not in a goldenenv project[/]: {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from None
    except ConfigError as e:
        fail(e)


GROUPS = ("stack", "jobs", "cost", "health", "estimate", "images", "team", "hostimage")
"""The command-group modules, in the order `goldenenv --help` lists their commands (a named group, `image`, after
the top-level commands)."""

for _group_module in GROUPS:
    app.add_typer(import_module(f"goldenenv.cli.{_group_module}").app)

"""A command line typed wrong, said in the project's words: the flag, what was given, and what to write.

Typer and click say `Invalid value for '--nodes' / '-N': Input should be a valid integer, unable to parse string as
an integer` or `No such option: --tail (Possible options: --stack)`: a library's phrasing in a box. Every command
of `goldenenv` is in `Group` (the root's class, which runs every subcommand's parsing inside its own `invoke`), so
each such mistake is caught once, here, and said the way a stack file's mistakes are: a heading, then
`  --nodes: 'x' is not a whole number; write one such as 4`. The exit code stays 2 (bad input).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from goldenenv.inwords import number_range

try:  # typer >= 0.24 carries its own click
    from typer._click import exceptions as _exc
except ImportError:  # pragma: no cover - an older typer on the real click
    from click import exceptions as _exc  # type: ignore[no-redef]


def _flag(param: Any) -> str:
    """The name a user typed or would type: --nodes for an option, FOLDER for an argument."""
    opts = [o for o in getattr(param, "opts", ()) if o.startswith("--")] or list(getattr(param, "opts", ()))
    if getattr(param, "param_type_name", "") == "argument" or not opts:
        return (param.name or "argument").upper()
    return opts[0]


def _given(param: Any, argv: Sequence[str]) -> str | None:
    """The text given to an option on the command line (the last one, as the parser keeps); None when not found."""
    found = None
    for i, token in enumerate(argv):
        for opt in getattr(param, "opts", ()):
            if token == opt and i + 1 < len(argv):
                found = argv[i + 1]
            elif opt.startswith("--") and token.startswith(opt + "="):
                found = token[len(opt) + 1:]
            elif not opt.startswith("--") and token.startswith(opt) and len(token) > len(opt):
                found = token[len(opt):]
    return found


def what_to_write(param: Any) -> str:
    """What the parameter takes, in words: `a whole number from 1 to 2,048`, `one of: ip, instance-id`."""
    desc = getattr(param, "type_descriptor", None)
    annotation = getattr(desc, "annotation", None)
    if desc is not None and desc.choices is not None:
        return "one of: " + ", ".join(str(c.value if isinstance(c, enum.Enum) else c) for c in desc.choices)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of: " + ", ".join(str(m.value) for m in annotation)
    info = getattr(desc, "parameter_info", None)
    limits = {k: v for k, v in (("ge", getattr(info, "min", None)), ("le", getattr(info, "max", None)))
              if v is not None}
    if annotation is bool:
        return "true or false"
    if annotation in (int, float):
        return number_range(limits, annotation is int) if limits else (
            "a whole number, such as 4" if annotation is int else "a number, such as 0.8")
    if annotation is Path or getattr(desc, "is_path", False):
        return "the path of a file or folder"
    return "a value"


def _help(param: Any) -> str | None:
    """A parameter's own help text as a phrase (`new or empty folder for the project`), or None."""
    text = (getattr(param, "help", None) or "").strip().split(". ")[0].rstrip(".")
    return text[:1].lower() + text[1:] if text else None


def _command(e: Exception, argv: Sequence[str], root: Any) -> tuple[str, Any]:
    """The command a mistake is about: its context's, else the one the command line names (a parser error carries
    no context)."""
    ctx = getattr(e, "ctx", None)
    path, command = [getattr(root, "name", None) or "goldenenv"], root
    for word in argv:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            continue
        path, command = [*path, word], sub
    if ctx is not None and len(ctx.command_path.split()) >= len(path):
        return ctx.command_path, ctx.command
    return " ".join(path), command


def _write(param: Any, hint: str) -> str:
    what = what_to_write(param) if param is not None else "a value"
    return f"write {what}" if what != "a value" else f"write one ({hint} what it takes)"


def in_words(e: Exception, argv: Sequence[str], root: Any = None) -> tuple[str, str]:
    """(heading, `key: message`) for a usage mistake."""
    command, cmd = _command(e, argv, root)
    heading = f"invalid command line for {command}"
    hint = f"`{command} -h` lists"
    params = list(getattr(cmd, "params", ()))
    if isinstance(e, _exc.NoSuchOption):
        if e.possibilities:
            return heading, (f"{e.option_name}: {command} takes no such flag; did you mean "
                             f"{' or '.join(sorted(e.possibilities))}? ({hint} its flags)")
        known = sorted({o for p in params for o in getattr(p, "opts", ()) if o.startswith("--")} | {"--help"})
        return heading, f"{e.option_name}: {command} takes no such flag; it takes {', '.join(known)}"
    if isinstance(e, _exc.MissingParameter) and e.param is not None:
        about = _help(e.param)
        return heading, f"{_flag(e.param)}: required; {_write(e.param, hint)}" + (f" ({about})" if about else "")
    if isinstance(e, _exc.BadParameter) and e.param is not None:
        given = _given(e.param, argv)
        got = f"got {given!r}; " if given is not None else ""
        return heading, f"{_flag(e.param)}: {got}{_write(e.param, hint)}"
    if isinstance(e, _exc.BadOptionUsage):
        param = next((p for p in params if e.option_name in getattr(p, "opts", ())), None)
        return heading, f"{e.option_name}: needs a value after it; {_write(param, hint)}"
    if e.message.startswith("No such command"):
        names = sorted(n for n, c in getattr(cmd, "commands", {}).items() if not c.hidden)
        given = _unknown_command(cmd, argv)
        return heading, f"{given!r}: {command} has no such command; it has {', '.join(names)} ({hint} what each does)"
    if e.message.startswith("Got unexpected extra argument"):
        extra = e.message.rpartition("(")[2].rstrip(")")
        return heading, f"{extra!r}: {command} takes no more arguments; drop it, or write it after the flag it is for ({hint} the flags)"
    return heading, f"{e.message} ({hint} what it takes)"


def _unknown_command(group: Any, argv: Sequence[str]) -> str:
    """The first word after the group's own name that is none of its commands."""
    names = set(getattr(group, "commands", {}))
    words = [a for a in argv if not a.startswith("-")]
    return next((w for w in words if w not in names and w != group.name), words[0] if words else "")


@contextmanager
def _said(argv: Sequence[str], root: Any) -> Iterator[None]:
    try:
        yield
    except _exc.NoArgsIsHelpError:
        raise
    except _exc.UsageError as e:
        from goldenenv.cli.common import errors

        heading, line = in_words(e, argv, root)
        errors.print(f"[bold red]{escape(heading)}[/]", soft_wrap=True)
        key, _, message = line.partition(": ")
        errors.print(f"  [red]{escape(key)}[/]: {escape(message)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


class Group(TyperGroup):
    """The root command: its own parsing and every subcommand's (all of which happen in its `invoke`) report a
    mistake in the project's words."""

    _argv: Sequence[str] = ()

    def make_context(self, info_name, args, parent=None, **extra):  # noqa: ANN001, ANN201 - click's signature
        self._argv = list(args)
        with _said(self._argv, self):
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx):  # noqa: ANN001, ANN201 - click's signature
        with _said(self._argv, self):
            return super().invoke(ctx)

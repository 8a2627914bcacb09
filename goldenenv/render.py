"""One Jinja2 environment over templates/, for images and cloud-init alike.

A template is the project's (templates/ of the user's folder) when it has one, else goldenenv's: the shared ones in
the packaged templates/, a cloud's in goldenenv/clouds/<cloud>/templates/, a fabric's in
goldenenv/fabrics/<fabric>/templates/ (goldenenv.project.shipped_template_folders finds them). Names are relative to
those folders (node/fsx-mount.sh.j2), so a caller never says whose folder a template is in; two shipped folders
holding the same name are refused, since which one renders would depend on the search order.

StrictUndefined: a value the caller forgot is an error, never an empty string. Templates
only place values; which fragments and in what order is decided by the caller.
"""

from __future__ import annotations

import functools
import shlex
from pathlib import Path
from typing import Any

import jinja2

from goldenenv import project

TEMPLATES = project.packaged("templates")
"""The packaged shared templates: with the clouds' and fabrics' folders, the fallback for any template the project
lacks."""


class TemplateClash(RuntimeError):
    """Two folders goldenenv ships hold a template of the same name."""


def docker_quote(value: object) -> str:
    """A double-quoted Dockerfile word: ENV and LABEL values keep quotes, backslashes and dollars literal.

    An instruction ends at a line break, quoted or not: a value holding a control character is refused.
    """
    text = str(value)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError(f"a Dockerfile value must be one line of printable text: {text!r}")
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{text}"'


def shell_quote(value: object) -> str:
    """One shell word: the value reaches the script as data, never as code (`x; touch pwned` stays a string)."""
    return shlex.quote(str(value))


def folders() -> list[Path]:
    """Where templates are looked up, first match wins: the current project's templates/, then TEMPLATES, then each
    cloud's and fabric's templates/."""
    return project.current().template_folders()


def refuse_clashes(searched: list[Path]) -> None:
    """Refuse two folders that hold a template of the same relative name: the message names the template and both
    folders, so the one that should not have it can be renamed or moved."""
    seen: dict[str, Path] = {}
    for folder in searched:
        for path in sorted(folder.rglob("*.j2")):
            name = path.relative_to(folder).as_posix()
            if name in seen:
                raise TemplateClash(f"template {name} is in both {_shown(seen[name])} and {_shown(folder)}: a "
                                    "template's name must be one folder's, or which one renders would depend on the "
                                    "search order; rename one (with its cloud's or fabric's name in it) or keep "
                                    "the shared copy only")
            seen[name] = folder


def _shown(folder: Path) -> str:
    """A shipped folder as goldenenv/clouds/aws/templates, or its full path when it is outside the package."""
    for top in (project.PACKAGE.parent, project.PACKAGE):
        if folder.resolve().is_relative_to(top):
            return folder.resolve().relative_to(top).as_posix()
    return str(folder)


def environment() -> jinja2.Environment:
    return _environment(tuple(folders()))


def source(template: str) -> Path:
    """The file `template` renders from (the first folder holding it); jinja2.TemplateNotFound where none does."""
    return Path(environment().get_template(template).filename or template)


@functools.cache
def _environment(searched: tuple[Path, ...]) -> jinja2.Environment:
    shipped = {folder.resolve() for folder in project.shipped_template_folders()}
    refuse_clashes([folder for folder in searched if folder.resolve() in shipped])
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(list(searched)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        comment_start_string="{##",  # shell's ${#array[@]} must stay literal
        comment_end_string="##}",
    )
    env.filters["docker_quote"] = docker_quote
    env.filters["sh"] = shell_quote
    return env


def render(template: str, **values: Any) -> str:
    return environment().get_template(template).render(**values)

"""One Jinja2 environment over templates/, for images and cloud-init alike.

A template is the project's (templates/ of the user's folder) when it has one, else goldenenv's packaged copy.

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
"""The packaged templates: the fallback for any template the project lacks."""


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
    """Where templates are looked up, first match wins: the current project's templates/, then TEMPLATES."""
    return project.current().template_folders()


def environment() -> jinja2.Environment:
    return _environment(tuple(folders()))


@functools.cache
def _environment(searched: tuple[Path, ...]) -> jinja2.Environment:
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

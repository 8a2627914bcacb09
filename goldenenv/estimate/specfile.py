"""A --spec run.yaml read with every value as the text written, so that the flags' parser reads it.

A spec file is goldenenv's own (Pulumi never reads it), so the YAML 1.1/1.2 ambiguities a stack file must refuse
(`no` a boolean or text, `13e9` a number or text) are settled the way the flags settle them: `params: 13e9` is
`--params 13e9`, `offload: no` is false. Reading stays as strict as for stack files otherwise (goldenenv.userfile:
no anchors or aliases, bounded size, depth and count of values, regular files only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from goldenenv.spec import ConfigError, Problem
from goldenenv.userfile import MAX_FILE_BYTES, _read_regular, _Refused, _StrictLoader, clip, dotted

NULLS = ("", "~", "null", "Null", "NULL")


def read_spec(path: Path, label: str) -> Any:
    """The document as plain data with every scalar as its text (None for a plain null), or one ConfigError."""
    try:
        data = _read_regular(path, label, "estimate spec")
    except FileNotFoundError:
        raise ConfigError([Problem(label, "no such estimate spec")]) from None
    except IsADirectoryError:
        raise ConfigError([Problem(label, "is a directory, not an estimate spec")]) from None
    except (OSError, ValueError) as e:
        raise ConfigError([Problem(label, f"cannot be read: {clip(getattr(e, 'strerror', None) or str(e))}")]) \
            from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError([Problem(label, f"is over {MAX_FILE_BYTES >> 20} MiB; an estimate spec is a few lines")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError([Problem(label, f"not UTF-8 text at byte {e.start}; save the file as UTF-8")]) from None
    try:
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except _Refused as e:
        where = f"{label} at {dotted(e.path)}" if e.path else label
        raise ConfigError([Problem(where, e.problem.replace("stack files", "estimate specs"))]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError([Problem(label, f"not valid YAML: {clip(e.problem or e.context or 'unreadable')}{at}")]) \
            from None
    except (yaml.YAMLError, ValueError, RecursionError, MemoryError) as e:
        raise ConfigError([Problem(label, f"not valid YAML: {clip((str(e).splitlines() or ['?'])[0])}")]) from None
    return None if node is None else _as_text(node)


def _as_text(node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return {str(_as_text(k)): _as_text(v) for k, v in node.value}
    if isinstance(node, yaml.SequenceNode):
        return [_as_text(item) for item in node.value]
    if node.style is None and node.value in NULLS:
        return None
    return node.value

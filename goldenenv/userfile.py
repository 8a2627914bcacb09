"""Strict reading of the YAML files users write (stack files, locks): plain data, or one clear ConfigError line.

No anchors or aliases, bounded size, depth and node count, text keys, plain scalar types: a small file can cost
neither seconds nor a traceback, whatever is in it. Regular files only: a named pipe or a device is never opened
for a blocking read.

One reading everywhere: `plan` reads a stack file with PyYAML (YAML 1.1 rules) and `pulumi up` reads the same file
with go-yaml (YAML 1.2's core schema, as far as Pulumi's config goes), so a value the two rule sets read
differently is refused, naming its key: base-60 numbers (1:30), yes/no/on/off/y/n as booleans, 0-prefixed octal
(0755, 012), 0o and 0b numbers, `_` in numbers (1_000), exponents without a dot or sign (1e3), and the 1.1-only line
breaks (NEL, U+2028, U+2029) written raw. What both read alike (true, 12, 1.5, 0x1F, .inf, null, quoted text) is
unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import os
import re
import stat

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from goldenenv.shown import as_written, clip, dotted, shown
from goldenenv.spec import ConfigError, Problem

MAX_FILE_BYTES = 1 << 20
"""A stack file or lock is a few KB; a bigger one is a mistake, and parsing it would cost seconds."""
MAX_DEPTH = 64
MAX_TEXT_CHARS = 1 << 16
"""One value in a stack file: room for a PEM or a kubeconfig of another provider, not for a runaway paste."""
MAX_INT_CHARS = 100
MAX_NODES = 10_000
"""Values (scalars, lists, mappings, keys counted) in one file: the largest lock has about 500, a stack file under
100. Reading is linear in them (about 0.2 s for 10,000), and so is validation: the cap keeps reading and checking
any file well under a second, where a 1 MiB list of 400,000 items cost 9-23 s and 221 MB."""


def read_yaml(path: Path, label: str, what: str) -> Any:
    """A user's YAML file as plain data (text keys; text, numbers, booleans, null, lists, mappings).

    Whatever is wrong with it, however it was made, comes back as one ConfigError line naming
    the file (`label`) and, where there is one, the key: never a traceback, and never seconds
    of work for a small file (no anchors or aliases, bounded size and depth).
    """
    try:
        data = _read_regular(path, label, what)
    except FileNotFoundError:
        raise ConfigError([Problem(label, f"no such {what}")]) from None
    except IsADirectoryError:
        raise ConfigError([Problem(label, f"is a directory, not a {what}")]) from None
    except (OSError, ValueError) as e:
        raise ConfigError([Problem(label, f"cannot be read: {clip(getattr(e, 'strerror', None) or str(e))}")]) from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError([Problem(label, f"is over {MAX_FILE_BYTES >> 20} MiB; a {what} is a few KB")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError([_undecodable(label, data, e)]) from None
    if (found := _ONE_ONE_BREAK.search(text)) is not None:
        raise ConfigError([_raw_break(label, text, found)])
    try:
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_node(node, [], loader)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except _Refused as e:
        problem = e.problem.replace("stack files", f"{what}s")
        raise ConfigError([Problem(f"{label} at {dotted(e.path)}" if e.path else label, problem + _at(e.mark))]) \
            from None
    except yaml.MarkedYAMLError as e:
        where = f"{label} at {dotted(e.path)}" if getattr(e, "path", None) else label
        detail = _yaml_words(e.problem or e.context or "unreadable")
        mark = _at(e.problem_mark or e.context_mark)
        raise ConfigError([Problem(where, f"not valid YAML: {clip(detail, 240)}{mark}")]) from None
    except (yaml.YAMLError, ValueError, RecursionError, MemoryError) as e:
        detail = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError([Problem(label, f"not valid YAML: {clip(detail)}")]) from None


_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _read_regular(path: Path, label: str, what: str) -> bytes:
    """The first MAX_FILE_BYTES + 1 bytes of a regular file. Opened without blocking and checked before any read:
    a named pipe (which would wait for a writer forever), a device or a socket is refused at once."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise ConfigError([Problem(label, f"is {kind}, not a regular file; a {what} is a file on disk")])
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return f.read(MAX_FILE_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)


_ONE_ONE_BREAK = re.compile("[\x85\u2028\u2029]")
"""Line breaks in YAML 1.1 (PyYAML, libyaml) and plain characters in YAML 1.2: written raw, the two read them
differently. Escaped in double quotes ("\\N", "\\L", "\\P") both read the character."""


def _raw_break(label: str, text: str, found: re.Match) -> Problem:
    char = found.group()
    line = text.count("\n", 0, found.start()) + 1
    column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
    path = None
    try:
        loader = _StrictLoader(_ONE_ONE_BREAK.sub("\ufffd", text))
        try:
            path = _find_replaced(loader.get_single_node(), [])
        finally:
            loader.dispose()
    except (_Refused, yaml.YAMLError, ValueError, RecursionError):
        pass
    name = {"\x85": "NEL", "\u2028": "LINE SEPARATOR", "\u2029": "PARAGRAPH SEPARATOR"}[char]
    return Problem(f"{label} at {dotted(path)}" if path else label,
                   f"a raw U+{ord(char):04X} ({name}) at line {line}, column {column}: YAML 1.1 reads it as a line "
                   f"break and YAML 1.2 (pulumi up) as a character; remove it, or write it escaped in double quotes "
                   f"(\"\\u{ord(char):04x}\")")


def _undecodable(label: str, data: bytes, error: UnicodeDecodeError) -> Problem:
    """Name the key whose value holds the bad bytes, found by reading the file with them replaced."""
    line = data[:error.start].count(b"\n") + 1
    message = f"not UTF-8 text: byte 0x{data[error.start]:02x} at line {line}; save the file as UTF-8"
    try:
        loader = _StrictLoader(data.decode("utf-8", errors="replace"))
        try:
            path = _find_replaced(loader.get_single_node(), [])
        finally:
            loader.dispose()
    except (_Refused, yaml.YAMLError, ValueError, RecursionError):
        path = None
    return Problem(f"{label} at {dotted(path)}" if path else label, message)


def _find_replaced(node: yaml.Node | None, path: list) -> list | None:
    if isinstance(node, yaml.ScalarNode):
        return path if "\ufffd" in node.value else None
    if isinstance(node, yaml.SequenceNode):
        items = enumerate(node.value)
    elif isinstance(node, yaml.MappingNode):
        items = ((k.value if isinstance(k, yaml.ScalarNode) else "?", v) for k, v in node.value)
        for k, _ in node.value:
            if isinstance(k, yaml.ScalarNode) and "\ufffd" in k.value:
                return path + [k.value]
    else:
        return None
    for step, child in items:
        found = _find_replaced(child, path + [step])
        if found is not None:
            return found
    return None


class _Refused(Exception):
    """Something YAML allows and a goldenenv file does not; names where it is."""

    def __init__(self, problem: str, path: list, mark: Any):
        super().__init__(problem)
        self.problem, self.path, self.mark = problem, path, mark


class _StrictComposer(Composer):
    """The YAML composer, refusing anchors and aliases and nesting deeper than MAX_DEPTH.

    An alias repeats a node without copying it, so a 1 KB "billion laughs" file expands to
    gigabytes in whoever walks it next (pydantic, JSON, the Pulumi runtime): none is accepted.
    """

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        above = self._paths[-1] if self._paths else []
        if parent is None:
            path = []
        elif isinstance(index, yaml.ScalarNode):
            path = above + [index.value]
        elif isinstance(index, int):
            path = above + [index]
        else:
            path = above
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused("anchors and aliases are not allowed in stack files; write the value out",
                           path, event.start_mark)
        if len(path) > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", path[:MAX_DEPTH], event.start_mark)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(f"holds more than {MAX_NODES:,} values (keys, items and lists counted); stack files hold "
                           "a few hundred", path, event.start_mark)
        self._paths.append(path)
        try:
            return super().compose_node(parent, index)
        except yaml.MarkedYAMLError as e:
            if not hasattr(e, "path"):
                e.path = path  # the key being read when the parser gave up
            raise
        finally:
            self._paths.pop()

    def compose_scalar_node(self, anchor: Any) -> yaml.ScalarNode:
        """A scalar, remembering whether YAML's rules chose its type (plain, untagged) or its tag did."""
        event = self.peek_event()
        node = super().compose_scalar_node(anchor)
        node.resolved = bool(event.implicit[0])
        node.explicit = event.tag not in (None, "!")
        return node


_TAG = "tag:yaml.org,2002:"
_AS_TEXT = (_TAG + "timestamp", _TAG + "value")
"""Scalars YAML would turn into dates or a special marker: Pulumi config is text, so they stay text."""
_SCALAR_TAGS = {_TAG + t for t in ("str", "int", "float", "bool", "null")} | set(_AS_TEXT)


def _loader_class() -> type:
    """libyaml's parser where installed (a 1 MiB file in about 2 s, not 10), under the strict composer."""
    try:
        from yaml._yaml import CParser
    except ImportError:
        from yaml.parser import Parser
        from yaml.reader import Reader
        from yaml.scanner import Scanner

        class _PyLoader(_StrictComposer, SafeConstructor, Resolver, Reader, Scanner, Parser):
            def __init__(self, stream: str):
                Reader.__init__(self, stream)
                Scanner.__init__(self)
                Parser.__init__(self)
                _init(self)

        return _PyLoader

    class _CLoader(_StrictComposer, SafeConstructor, Resolver, CParser):
        def __init__(self, stream: str):
            CParser.__init__(self, stream)
            _init(self)

    return _CLoader


_StrictLoader = _loader_class()
for _tag in _AS_TEXT:
    _StrictLoader.add_constructor(_tag, SafeConstructor.construct_yaml_str)


def _init(loader: Any) -> None:
    Composer.__init__(loader)
    SafeConstructor.__init__(loader)
    Resolver.__init__(loader)
    loader._paths = []
    loader._nodes = 0


def _check_node(node: yaml.Node, path: list, loader: Any) -> None:
    """Plain data only, each problem named by its key: text keys, no tags beyond YAML's core types, no value YAML
    1.1 and 1.2 read differently."""
    if isinstance(node, yaml.MappingNode):
        _check_tag(node, _TAG + "map", path)
        seen: set[str] = set()
        for key, value in node.value:
            if key.tag == _TAG + "merge":
                raise _Refused("merge keys (<<) are not allowed in stack files; write the keys out",
                               path, key.start_mark)
            if not isinstance(key, yaml.ScalarNode):
                raise _Refused("a list or mapping used as a key; keys are text", path, key.start_mark)
            if key.tag != _TAG + "str" or (getattr(key, "resolved", False) and not isinstance(_core(key.value), str)):
                raise _Refused(f"key {clip(key.value)} is not text; quote it ('{clip(key.value)}') or remove it",
                               path, key.start_mark)
            if key.value in seen:
                raise _Refused("set twice in the same mapping; keep one", path + [key.value], key.start_mark)
            seen.add(key.value)
            _check_node(value, path + [key.value], loader)
    elif isinstance(node, yaml.SequenceNode):
        _check_tag(node, _TAG + "seq", path)
        for i, item in enumerate(node.value):
            _check_node(item, path + [i], loader)
    else:
        if node.tag not in _SCALAR_TAGS:
            raise _Refused(f"tag {_tag_name(node.tag)} is not allowed; write plain text, numbers or lists",
                           path, node.start_mark)
        if node.tag == _TAG + "int" and len(node.value) > MAX_INT_CHARS:
            digits = sum(c.isdigit() for c in node.value)
            raise _Refused(f"an integer of {digits:,} digits is too large for any setting", path, node.start_mark)
        if len(node.value) > MAX_TEXT_CHARS:
            raise _Refused(f"{shown(node.value)} is too long; a value is at most {MAX_TEXT_CHARS:,} characters",
                           path, node.start_mark)
        _check_reading(node, path, loader)


_CORE_NULL = ("", "~", "null", "Null", "NULL")
_CORE_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_CORE_INT = re.compile(r"[-+]?[0-9]+")
_CORE_OCT = re.compile(r"0o[0-7]+")
_CORE_HEX = re.compile(r"0x[0-9a-fA-F]+")
_CORE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_CORE_INF = re.compile(r"[-+]?\.(inf|Inf|INF)")
_CORE_NAN = re.compile(r"\.(nan|NaN|NAN)")
_ONE_ONE_ONLY_BOOL = {"y": True, "Y": True, "n": False, "N": False}
"""Booleans in the YAML 1.1 spec (and go-yaml v2) that PyYAML reads as text: read as 1.1 booleans here, so they
are refused like yes and no."""


def _core(text: str) -> Any:
    """A plain scalar as YAML 1.2's core schema reads it (what go-yaml, and so `pulumi up`, reads)."""
    if text in _CORE_NULL:
        return None
    if text in _CORE_BOOL:
        return _CORE_BOOL[text]
    if _CORE_INT.fullmatch(text):
        return int(text) if len(text) <= MAX_INT_CHARS else _Huge()
    if _CORE_OCT.fullmatch(text):
        return int(text[2:], 8) if len(text) <= MAX_INT_CHARS else _Huge()
    if _CORE_HEX.fullmatch(text):
        return int(text[2:], 16) if len(text) <= MAX_INT_CHARS else _Huge()
    if _CORE_FLOAT.fullmatch(text):
        return float(text)
    if _CORE_INF.fullmatch(text):
        return float("-inf") if text.startswith("-") else float("inf")
    if _CORE_NAN.fullmatch(text):
        return float("nan")
    return text


class _Huge(int):
    """An integer too long to convert (its length is refused as such)."""


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def _check_reading(node: yaml.ScalarNode, path: list, loader: Any) -> None:
    """A scalar YAML 1.1 (PyYAML: `plan`) and YAML 1.2 (go-yaml: `pulumi up`) read alike, or a refusal naming the
    two readings and how to write either so both agree."""
    tag, text = node.tag, node.value
    resolved, explicit = getattr(node, "resolved", False), getattr(node, "explicit", False)
    if not resolved and (not explicit or tag == _TAG + "str"):
        return  # quoted or block text: text under both
    if resolved and text in _ONE_ONE_ONLY_BOOL:
        old = _ONE_ONE_ONLY_BOOL[text]
    elif tag == _TAG + "str" or tag in _AS_TEXT:
        old = text
    else:
        old = loader.construct_object(node) if tag in _SCALAR_TAGS else text
    new = _core(text)
    if isinstance(new, _Huge):
        raise _Refused(f"an integer of {sum(c.isdigit() for c in text):,} digits is too large for any setting",
                       path, node.start_mark)
    if explicit and tag == _TAG + "float" and type(new) is int:
        new = float(new)
    if _same(old, new):
        return
    *others, last = dict.fromkeys(_both(v) for v in sorted((old, new, text), key=lambda v: isinstance(v, str)))
    choices = f"{', '.join(others)} or {last}"
    raise _Refused(f"{clip(text)} reads as {_reading(old)} by YAML 1.1 (plan) but as {_reading(new)} by YAML 1.2 "
                   f"(pulumi up); write {choices}", path, node.start_mark)


def _reading(value: Any) -> str:
    return f"the text {_both(value)}" if isinstance(value, str) else _both(value)


def _both(value: Any) -> str:
    """A value spelt so YAML 1.1 and 1.2 read it alike: true, 90, 1.0e+300, .inf, null, 'text' (quoted)."""
    if isinstance(value, str):
        return clip("'" + value.replace("'", "''") + "'")
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        mantissa, e, exponent = repr(value).partition("e")
        return mantissa + ("" if "." in mantissa else ".0") + (e + exponent if e else "")
    return as_written(value)


def _check_tag(node: yaml.Node, expected: str, path: list) -> None:
    if node.tag != expected:
        raise _Refused(f"tag {_tag_name(node.tag)} is not allowed; write plain text, numbers or lists",
                       path, node.start_mark)


def _tag_name(tag: str) -> str:
    return clip("!!" + tag.removeprefix(_TAG) if tag.startswith(_TAG) else tag)


_YAML_PROBLEMS = (
    ("mapping values are not allowed", "a ':' where a value was expected; quote a value that holds ': ', or put each "
                                       "key on a line of its own"),
    ("found character that cannot start any token", "a character no value starts with (a tab? indent with spaces; "
                                                    "a value starting with @ or a backtick: quote it)"),
    ("found unexpected end of stream", "the file ends inside a quoted value; close the quote"),
    ("did not find expected key", "a line that does not line up with the keys above it; indent it as they are"),
    ("did not find expected '-' indicator", "a line that does not line up with the list above it; indent it as the "
                                            "list's '- ' items are, or start it with '- '"),
    ("did not find expected ',' or ']'", "a list in [ ] that is not closed; end it with ]"),
    ("did not find expected ',' or '}'", "a mapping in { } that is not closed; end it with }"),
    ("expected <block end>", "a line indented differently from the keys above it; line it up with them"),
    ("could not find expected ':'", "a key without ':' after it; write key: value"),
)
"""The YAML parser's problems in the project's words: what is wrong and what to write instead."""


def _yaml_words(problem: str) -> str:
    """A YAML parser's problem said plainly; one not in _YAML_PROBLEMS is kept as the parser says it."""
    return next((words for start, words in _YAML_PROBLEMS if problem.startswith(start)), problem)


def _at(mark: Any) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""

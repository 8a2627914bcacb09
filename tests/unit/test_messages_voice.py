"""Every validation message is in the project's words: it names the key, says what to write, and never shows a
regular expression or pydantic's phrasing.

An Azure tag key with `%` once got `String should match pattern '^[\\p{L}...`: the rule is held here over every field
of the stack file's, the image lock's and the host lock's models that has a pattern, a bound, a length or a set of
choices, found by walking the models, so a field added tomorrow is held to it the day it is added. Each gets a bad
value, and its message is read the way `goldenenv plan` and `goldenenv image` print it (stackconfig.error_message at
the key user_path names).
"""

from __future__ import annotations

import copy
import enum
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from goldenenv import inwords, stackconfig
from goldenenv.cli import app
from goldenenv.images.host import HostLock
from goldenenv.images.lock import Lock
from goldenenv.spec import ClusterSpec

REPO = Path(__file__).resolve().parents[2]
FOREIGN = ("String should", "pattern", "^", "\\p{", "Input should", "validation error", "pydantic", "List should",
           "Value error", "Dictionary should", "[a-z")
"""What a regular expression or pydantic's own wording looks like in a message."""
SAYS_WHAT_TO_WRITE = re.compile(r"\b(write|must be|list|at most|at least|use|set|give|drop|pick|rename|shorten|keep)\b")
BAD_TEXT = "Bad\x01 $"
"""Text no pattern of the models takes: a control character, a space, a capital letter and a `$`."""


def _models(root: type[BaseModel], seen: set) -> list[type[BaseModel]]:
    if root in seen:
        return []
    seen.add(root)
    found = [root]
    for info in root.model_fields.values():
        for t in (info.annotation, *_nested(info.annotation)):
            if isinstance(t, type) and issubclass(t, BaseModel):
                found += _models(t, seen)
    return found


def _nested(annotation: Any) -> list[Any]:
    out = []
    for arg in typing.get_args(annotation):
        out += [arg, *_nested(arg)]
    return out


def _meta(annotated: Any) -> list[Any]:
    return [m for arg in typing.get_args(annotated)[1:] for m in (*getattr(arg, "metadata", ()), arg)]


def _bad_for(annotation: Any, meta: list[Any]) -> list[Any]:
    """Values a field of this type and these constraints refuses, each for one constraint."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _bad_for(typing.get_args(annotation)[0], meta + _meta(annotation))
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return [v for arg in typing.get_args(annotation) if arg is not type(None) for v in _bad_for(arg, meta)]
    limits = inwords.bounds(meta)
    pattern = any(getattr(m, "pattern", None) for m in meta)
    bad: list[Any] = []
    if origin in (list, tuple):
        (item,) = typing.get_args(annotation)[:1] or (Any,)
        bad += [[v] for v in _bad_for(item, [])]
        if "max_length" in limits:
            bad.append(["x"] * (limits["max_length"] + 1))
        if limits.get("min_length"):
            bad.append([])
        return bad
    if origin is dict:
        key, value = typing.get_args(annotation)
        bad += [{v: "x"} for v in _bad_for(key, []) if isinstance(v, str)]
        bad += [{"k": v} for v in _bad_for(value, [])]
        if limits.get("min_length"):
            bad.append({})
        return bad
    if origin is typing.Literal or (isinstance(annotation, type) and issubclass(annotation, enum.Enum)):
        return ["not-a-choice"]
    if annotation is str:
        if pattern:
            bad.append(BAD_TEXT)
        if "max_length" in limits:
            bad.append("x" * (limits["max_length"] + 1))
    if annotation in (int, float):
        bad.append(True)  # YAML's yes/no: pydantic would read it as 1
        if "ge" in limits or "gt" in limits:
            bad.append(limits.get("ge", limits.get("gt")) - 1)
        if "le" in limits or "lt" in limits:
            bad.append(limits.get("le", limits.get("lt")) + 1)
        if limits:
            bad.append("lots")
    return bad


def _cases() -> list[Any]:
    cases = []
    for root in (ClusterSpec, Lock, HostLock):
        for model in _models(root, set()):
            for name, info in model.model_fields.items():
                for i, value in enumerate(_bad_for(info.annotation, list(info.metadata))):
                    cases.append(pytest.param(model, info.alias or name, value,
                                              id=f"{root.__name__}:{model.__name__}.{info.alias or name}[{i}]"))
    return cases


CASES = _cases()


def test_the_walk_finds_the_constrained_fields():
    """A walk that found nothing would pass every test below."""
    fields = {(c.values[0], c.values[1]) for c in CASES}
    assert len(fields) > 60, len(fields)
    assert {(ClusterSpec, "region"), (ClusterSpec, "nodes")} <= fields
    assert any(model.__name__ == "Tags" and key == "extra" for model, key in fields)
    assert any(model is Lock and key == "python" for model, key in fields)


@pytest.mark.parametrize("model, key, value", CASES)
def test_a_bad_value_gets_a_message_in_the_projects_words(model, key, value):
    with pytest.raises(ValidationError) as caught:
        model.model_validate({key: value})
    errors = stackconfig.user_errors(caught.value.errors(), {key: value}, model)
    ours = [e for e in errors if stackconfig.user_path(e["loc"], {key: value}, model)[0][:1] == [key]
            and e["type"] not in ("missing", "extra_forbidden")]
    assert ours, f"{model.__name__}.{key}: {value!r} was not refused at its key"
    for err in ours:
        message = stackconfig.error_message(err, model)
        where = ".".join(str(p) for p in stackconfig.user_path(err["loc"], {key: value}, model)[0])
        assert where.startswith(key), (where, key)
        assert SAYS_WHAT_TO_WRITE.search(message), f"{where}: {message}"
        assert not [w for w in FOREIGN if w in message], f"{where}: {message}"


def test_every_pattern_is_said_in_words():
    """A pattern of a fixed form (sm_90, repo@sha256:...) needs its field's description; the rest are read."""
    for root in (ClusterSpec, Lock, HostLock):
        described = inwords.described_patterns(root)
        for info in inwords.field_infos(root):
            for m in info.metadata:
                pattern = getattr(m, "pattern", None)
                if pattern:
                    assert described.get(pattern) or inwords.pattern_words(pattern), (root.__name__, pattern)


@pytest.mark.parametrize("pattern, words", [
    (r"^[a-z][a-z0-9-]{0,30}$", "lower-case letters, digits and -, starting with a lower-case letter, at most 31 "
                                "characters"),
    (r"^[A-Z]{3}$", "capital letters, exactly 3 characters"),
    (r"^[0-9a-f]{64}$", "digits and a to f, exactly 64 characters"),
])
def test_a_pattern_of_character_classes_reads_as_words(pattern, words):
    assert inwords.pattern_words(pattern) == words


# ---------------------------------------------------------------- through the commands a user runs

def _stack(tmp_path: Path, name: str, extra_tags: dict[str, str]) -> Path:
    config = copy.deepcopy(stackconfig.read_stack_file(REPO / "stacks" / f"Pulumi.{name}.yaml"))
    config["goldenenv:tags"] = {**config["goldenenv:tags"], "extra": extra_tags}
    (tmp_path / "Pulumi.voice.yaml").write_text(yaml.safe_dump({"config": config}, allow_unicode=True),
                                                encoding="utf-8")
    return tmp_path


def _plan(tmp_path: Path) -> Any:
    return CliRunner().invoke(app, ["plan", "-s", "voice", "--stacks-dir", str(tmp_path)], env={"COLUMNS": "400"})


def test_the_issues_azure_tag_key_with_a_percent_sign_is_told_in_words(tmp_path):
    result = _plan(_stack(tmp_path, "azure-nc-dev", {"Team%": "ml"}))
    output = " ".join(result.output.split())
    assert result.exit_code == 2, output
    assert "goldenenv:tags.extra.Team%" in output and "Azure refuses the tag name 'Team%'" in output
    assert "has '%'" in output and "write a name without" in output
    assert not [w for w in FOREIGN if w in output], output


def test_a_tag_with_a_shell_character_is_refused_naming_it_and_what_to_write(tmp_path):
    result = _plan(_stack(tmp_path, "aws-g5-dev", {"team": "ml$(id)"}))
    output = " ".join(result.output.split())
    assert result.exit_code == 2, output
    assert "goldenenv:tags.extra.team: 'ml$(id)' has '$' '(' ')', which is not allowed here; write letters" in output
    assert not [w for w in FOREIGN if w in output], output


def test_a_lock_field_of_a_fixed_form_says_the_form(tmp_path):
    from goldenenv.images import lock
    from goldenenv.spec import ConfigError

    import shutil

    shutil.copytree(lock.IMAGES / "h100-torch", tmp_path / "h100-torch")
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "lock.yaml").write_text(yaml.safe_dump({"name": "mine", "extends": "h100-torch", "fabric": "ib",
                                                      "ib": {"packages": ["libibverbs1; curl x|sh"]}}))
    with pytest.raises(ConfigError) as caught:
        lock.load("mine", tmp_path)
    text = " ".join(str(p) for p in caught.value.problems)
    assert "mine/lock.yaml: ib.packages.0: 'libibverbs1; curl x|sh' is not in the form taken here; write a Debian " \
           "package name" in text
    assert not [w for w in FOREIGN if w in text], text


def test_a_host_lock_field_is_said_with_its_own_words(tmp_path):
    """A host lock's errors are read against the host lock's model (they were read against a golden lock's)."""
    from goldenenv.images import host
    from goldenenv.spec import ConfigError

    doc = yaml.safe_load((REPO / "images" / "hosts" / "ubuntu-gpu.yaml").read_text(encoding="utf-8"))
    doc["name"] = "bad"
    doc["repositories"]["docker"]["sources"]["ubuntu-22.04"]["url"] = "ftp://download.docker.com"
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "bad.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        host.load_host("bad", tmp_path)
    text = " ".join(str(p) for p in caught.value.problems)
    assert "hosts/bad.yaml: repositories.docker.sources.ubuntu-22.04.url: 'ftp://download.docker.com' is not in the " \
           "form taken here; write an https:// address" in text, text
    assert not [w for w in FOREIGN if w in text], text


def test_a_network_with_host_bits_is_told_its_own_address():
    from goldenenv.spec import Network

    with pytest.raises(ValidationError) as caught:
        Network.model_validate({"cidr": "10.42.0.1/16"})
    [err] = caught.value.errors()
    assert stackconfig.error_message(err, Network) == "'10.42.0.1/16' has host bits set; write the network's own " \
                                                      "address, 10.42.0.0/16"


@pytest.mark.parametrize("text, says", [
    ("a: b: c", "a ':' where a value was expected; quote a value that holds ': '"),
    ("a:\n\tb: 1", "(a tab? indent with spaces"),
    ('a: "unclosed', "the file ends inside a quoted value; close the quote"),
    ("a:\n  - 1\n b: 2", "does not line up with the keys above it"),
    ("a: [1, 2", "a list in [ ] that is not closed; end it with ]"),
])
def test_a_yaml_mistake_is_said_in_words_with_its_place(tmp_path, text, says):
    from goldenenv.spec import ConfigError
    from goldenenv.userfile import read_yaml

    (tmp_path / "s.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        read_yaml(tmp_path / "s.yaml", "s.yaml", "stack file")
    [problem] = caught.value.problems
    assert problem.message.startswith("not valid YAML: ") and says in problem.message, problem.message
    assert "(line " in problem.message and "not allowed in this context" not in problem.message

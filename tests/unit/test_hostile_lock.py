"""A lock must never be able to run a command: every field that reaches the Dockerfile is refused or inert.

Each payload goes into each lock field. Either loading refuses it with a ConfigError naming the field, or the
value is legal text (a description) and the rendered Dockerfile has exactly the instructions it would have had,
with the payload read back as data from its quoted place.
"""

from __future__ import annotations

import copy
import re
import shutil
import shlex
import types
import typing
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from goldenenv import spec as spec_module
from goldenenv.images import lock as lock_module
from goldenenv.images.dockerfile import BuildOptions, dockerfile
from goldenenv.images.lock import IMAGES, Lock, Pin, load
from goldenenv.spec import ConfigError

PAYLOADS = {
    "semicolon": "x; touch pwned",
    "substitution": "$(touch pwned)",
    "backticks": "`touch pwned`",
    "single-quote": "x' && touch pwned '",
    "double-quote": 'x" && touch pwned "',
    "ampersand": "x && touch pwned",
    "newline": "x\ntouch pwned",
    "trailing-newline": "x\n",
    "env-instruction": "\n ENV LD_PRELOAD=/x.so",
    "run-instruction": "\nRUN touch /pwned",
    "continuation": "x \\\nRUN touch /pwned",
    "option": "--allow-unauthenticated",
}


def _set(path: str) -> Callable[[dict, str], None]:
    """A setter for a dotted lock path; a numeric part is a list index, `{}` renames the first key there."""
    def put(doc: dict, value: str) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if last == "{}":
            key = next(iter(node))
            node[value] = node.pop(key)
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return put


def _image_base(doc: dict, value: str) -> None:
    doc["base"] = {"image": value}


def _os_package(doc: dict, value: str) -> None:
    doc["base"]["osPackages"] = ["procps", value]


def _requirement(doc: dict, value: str) -> None:
    doc["requirements"]["project"].append(value)


FIELDS = [  # (id, lock to start from, how the payload goes in, the key the error must name)
    ("name", "cpu-dev", _set("name"), "name"),
    ("description", "cpu-dev", _set("description"), "description"),
    ("bootstrap-release", "cpu-dev", _set("base.bootstrap.release"), "base.bootstrap.release"),
    ("bootstrap-mirror", "cpu-dev", _set("base.bootstrap.mirror"), "base.bootstrap.mirror"),
    ("bootstrap-packages", "cpu-dev", _set("base.bootstrap.packages.0"), "base.bootstrap.packages.0"),
    ("os-packages", "cpu-dev", _os_package, "base.osPackages.1"),
    ("base-image", "cpu-dev", _image_base, "base.image"),
    ("python", "cpu-dev", _set("python"), "python"),
    ("cuda", "h100-torch", _set("cuda"), "cuda"),
    ("cudnn", "h100-torch", _set("cudnn"), "cudnn"),
    ("nccl", "h100-torch", _set("nccl"), "nccl"),
    ("torch", "cpu-dev", _set("torch"), "torch"),
    ("torch-cuda", "h100-torch", _set("torchCuda"), "torchCuda"),
    ("deepspeed", "h100-torch", _set("deepspeed"), "deepspeed"),
    ("deepspeed-ops", "h100-torch", _set("deepspeedOps.prebuilt.0"), "deepspeedOps.prebuilt.0"),
    ("compiler-packages", "h100-torch", _set("deepspeedOps.compilerPackages.0"), "deepspeedOps.compilerPackages.0"),
    ("compiler-components", "h100-torch", _set("deepspeedOps.compilerComponents.0"),
     "deepspeedOps.compilerComponents.0"),
    ("compiler", "h100-torch", _set("deepspeedOps.compiler"), "deepspeedOps.compiler"),
    ("extends", "aws-h100", _set("extends"), "extends"),
    ("fabric", "aws-h100", _set("fabric"), "fabric"),
    ("efa-installer", "aws-h100", _set("efa.installer"), "efa.installer"),
    ("efa-installer-sha256", "aws-h100", _set("efa.installerSha256"), "efa.installerSha256"),
    ("efa-aws-ofi-nccl", "aws-h100", _set("efa.awsOfiNccl"), "efa.awsOfiNccl"),
    ("erdma-packages", "alicloud-h100", _set("erdma.packages.0"), "erdma.packages.0"),
    ("gpu-archs", "h100-torch", _set("gpuArchs.0"), "gpuArchs.0"),
    ("requirements", "cpu-dev", _requirement, "requirements.project"),
    ("package-name", "cpu-dev", _set("packages.{}"), "packages."),
    ("package-version", "cpu-dev", _set("packages.numpy.version"), "packages.numpy.version"),
    ("package-sha256", "cpu-dev", _set("packages.numpy.sha256.0"), "packages.numpy.sha256.0"),
    ("package-group", "cpu-dev", _set("packages.numpy.group"), "packages.numpy.group"),
    ("user", "cpu-dev", _set("user"), "user"),
]
LEGAL_TEXT = {"description"}
"""Fields whose values may be any one line of text: they reach the Dockerfile only through docker_quote."""


def instructions(text: str) -> list[str]:
    """The Dockerfile as logical instructions (continuation lines joined, comments dropped)."""
    found, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line
        if line.endswith("\\"):
            current = current[:-1]
            continue
        found.append(current)
        current = ""
    return found + [current] * bool(current)


def docker_words(text: str) -> list[str]:
    """KEY="value" words of an ENV/LABEL instruction, unquoted as Docker reads them (\\ escapes the next char)."""
    return [(key, re.sub(r"\\(.)", r"\1", value))
            for key, value in re.findall(r'([\w.-]+)="((?:[^"\\]|\\.)*)"', text)]


def write_lock(tmp_path: Path, doc: dict) -> str:
    folder = tmp_path / "hostile"
    folder.mkdir(exist_ok=True)
    if isinstance(doc.get("name"), str) and (IMAGES / doc["name"]).is_dir():
        doc = {**doc, "name": "hostile"}  # a lock's name is its folder's; a payload in it stays
    stem = doc.get("extends")
    if isinstance(stem, str) and (IMAGES / stem / "lock.yaml").is_file():  # the stem it extends, beside it
        (tmp_path / stem).mkdir(exist_ok=True)
        shutil.copyfile(IMAGES / stem / "lock.yaml", tmp_path / stem / "lock.yaml")
    (folder / "lock.yaml").write_text(yaml.safe_dump(doc))
    return "hostile"


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize(("lock_name", "put", "key"), [f[1:] for f in FIELDS], ids=[f[0] for f in FIELDS])
def test_a_payload_in_a_lock_field_is_refused_or_inert(tmp_path, lock_name, put, key, payload):
    original = yaml.safe_load((IMAGES / lock_name / "lock.yaml").read_text())
    doc = copy.deepcopy(original)
    put(doc, payload)
    try:
        lock = load(write_lock(tmp_path, doc), tmp_path)
    except ConfigError as e:
        message = str(e)
        assert f"lock.yaml: {key}" in message, f"the error names the field {key}: {message}"
        assert "\n" not in message.split("lock.yaml: ", 1)[1], "the payload cannot break the message into lines"
        return
    assert key in LEGAL_TEXT, f"{key} accepted {payload!r}"
    unchanged = load(write_lock(tmp_path, original), tmp_path)
    text = dockerfile(lock, "base:ref").replace(lock.content_hash, unchanged.content_hash)
    baseline = dockerfile(unchanged, "base:ref")
    rendered, expected = instructions(text), instructions(baseline)
    assert [i.split()[0] for i in rendered] == [i.split()[0] for i in expected], "no instruction added or split"
    changed = [i for i, j in zip(rendered, expected) if i != j]
    assert len(changed) == 1 and changed[0].startswith("LABEL"), changed
    assert ("org.opencontainers.image.description", payload) in docker_words(changed[0])
    for run in (i for i in rendered if i.startswith("RUN")):
        assert "touch" not in shlex.split(run), "no payload word reaches a shell command"


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_a_payload_in_the_apt_mirror_build_option_is_refused(payload):
    """The mirror reaches a sed replacement in the apt builder stage: only URL characters get there."""
    mirrors = [payload, "http://deb.debian.org/debian" + payload]
    if payload.startswith("--"):
        mirrors.pop()  # http://deb.debian.org/debian--allow-unauthenticated is one URL word, as inert as any path
    for mirror in mirrors:
        with pytest.raises(ConfigError, match="--apt-mirror"):
            BuildOptions(apt_mirror=mirror)


def test_legal_values_still_load_and_render_as_one_word_each(tmp_path):
    """The patterns are not so tight that real values fail: versioned Debian packages, extras, credentials."""
    doc = yaml.safe_load((IMAGES / "cpu-dev" / "lock.yaml").read_text())
    doc["description"] = 'CPU torch \u2014 f\u00fcr CI; "quoted" $HOME `x`'
    packages = ["libc6=2.36-9+deb12u4", "python3.11", "g++", "libstdc++6=1:12.2.0-14"]
    doc["base"]["osPackages"] = packages
    doc["base"]["bootstrap"]["mirror"] = "https://user:p%40ss@mirror.internal:8443/debian/"
    doc["requirements"]["project"] += ["uvicorn[standard]>=0.30,<1"]
    lock = load(write_lock(tmp_path, doc), tmp_path)
    download = next(i for i in instructions(dockerfile(lock, "base:ref")) if "--download-only" in i)
    words = shlex.split(download)
    start = words.index("--download-only") + 1
    assert words[start:start + len(packages)] == packages
    assert BuildOptions(apt_mirror="http://user:secret@deb.debian.org/debian").apt_mirror


# ---------------------------------------------------------------- a section of the wrong kind

MODEL_NAME = re.compile(r"\b(%s)\b" % "|".join(sorted(
    v.__name__ for m in (spec_module, lock_module) for v in vars(m).values()
    if isinstance(v, type) and issubclass(v, BaseModel))))
"""Any pydantic model class of a lock or the stack's spec, as a word: no message may name one (issue 21)."""


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def _sections(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], type[BaseModel]]]:
    """Every mapping a lock writes, by its keys as written (base.bootstrap), with the model it holds."""
    return [found for name, field in model.model_fields.items() for inner in _models(field.annotation)
            for found in [((*path, field.alias or name), inner), *_sections(inner, (*path, field.alias or name))]]


SECTIONS = _sections(Lock) + [(("packages", "numpy"), Pin)]  # a package's pin: a mapping under its name


def test_every_lock_model_is_a_section_here():
    written = {v for v in vars(lock_module).values()
               if isinstance(v, type) and issubclass(v, spec_module.Model) and v not in (spec_module.Model, Lock)}
    assert written <= {model for _, model in SECTIONS}, written - {model for _, model in SECTIONS}


@pytest.mark.parametrize("value, written", [(False, "false"), (True, "true"), ("x", "'x'"), ([1], "a list")],
                         ids=["false", "true", "text", "list"])
@pytest.mark.parametrize("path, model", SECTIONS, ids=[".".join(p) for p, _ in SECTIONS])
def test_a_lock_section_of_the_wrong_kind_says_what_it_holds(tmp_path, path, model, value, written):
    """`slurm: false` in a lock is refused with the keys slurm holds, as the lock writes them: never `instance of
    Slurm`."""
    doc = yaml.safe_load((IMAGES / "cpu-dev" / "lock.yaml").read_text())
    _set(".".join(path))(doc, value)
    with pytest.raises(ConfigError) as caught:
        load(write_lock(tmp_path, doc), tmp_path)
    keys = ", ".join(f.alias or n for n, f in model.model_fields.items())
    expected = f"hostile/lock.yaml: {'.'.join(path)}: must be a mapping with {keys}; got {written}"
    assert expected in [str(p) for p in caught.value.problems]
    for problem in caught.value.problems:
        assert not MODEL_NAME.search(str(problem)), str(problem)


# ---------------------------------------------------------------- a lock's name is its folder's (issue 22)

def test_a_lock_whose_name_is_not_its_folder_is_refused(tmp_path):
    """A copied lock that kept another's name would build that lock's image (goldenenv/<name>)."""
    doc = yaml.safe_load((IMAGES / "cpu-dev" / "lock.yaml").read_text())
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "lock.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(lock_module.LockError) as caught:
        load("mine", tmp_path)
    assert [str(p) for p in caught.value.problems] == [
        "mine/lock.yaml: name: 'cpu-dev' is not the lock's folder; write name: mine (the image it builds is "
        "goldenenv/<name>)"]
    doc["name"] = "mine"
    (tmp_path / "mine" / "lock.yaml").write_text(yaml.safe_dump(doc))
    assert load("mine", tmp_path).tag.startswith("goldenenv/mine:")


def test_lock_errors_are_headed_as_a_lock_with_its_file(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from goldenenv.cli import app

    doc = yaml.safe_load((IMAGES / "cpu-dev" / "lock.yaml").read_text())
    doc["python"] = "three"
    shutil.copytree(IMAGES, tmp_path / "images")
    (tmp_path / "images" / "cpu-dev" / "lock.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setattr("goldenenv.images.lock.IMAGES", tmp_path / "images")
    done = CliRunner().invoke(app, ["image", "check-lock", "cpu-dev"], env={"COLUMNS": "300"})
    assert done.exit_code == 2, done.output
    heading = done.output.splitlines()[0]
    assert heading == f"invalid lock in {tmp_path / 'images' / 'cpu-dev' / 'lock.yaml'}", done.output
    assert "cpu-dev/lock.yaml: python" in done.output and "invalid stack configuration" not in done.output
    (tmp_path / "images" / "cpu-dev" / "lock.yaml").write_text("name: cpu-dev\nuser: yes\n")
    done = CliRunner().invoke(app, ["image", "check-lock", "cpu-dev"], env={"COLUMNS": "300"})
    assert done.exit_code == 2 and done.output.startswith("invalid lock in "), done.output
    assert "cpu-dev/lock.yaml at user: yes reads as true by YAML 1.1" in done.output


def test_image_list_shows_a_broken_lock_and_exits_2_without_a_traceback(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from goldenenv.cli import app

    shutil.copytree(IMAGES, tmp_path / "images")
    doc = yaml.safe_load((IMAGES / "cpu-dev" / "lock.yaml").read_text())
    (tmp_path / "images" / "cpu-dev" / "lock.yaml").write_text(yaml.safe_dump({**doc, "name": "other"}))
    monkeypatch.setattr("goldenenv.images.lock.IMAGES", tmp_path / "images")
    done = CliRunner().invoke(app, ["image", "list"], env={"COLUMNS": "300"})
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert "invalid lock in" in done.output and "h100-torch" in done.output   # the other locks are still listed

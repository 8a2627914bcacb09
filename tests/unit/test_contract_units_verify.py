"""Every systemd unit a shipped stack's user data writes (its Slurm head and each pool) passes `systemd-analyze
verify` with no warning: a warning is a unit systemd runs differently from how it reads (a dependency it ignores, a
command it cannot run), found on the node only when a boot goes wrong.

The units are read from the cloud-config the plan renders (write_files), written with every other file of the same
user data into a root that stands for the node's: the OS's own units (sysinit.target, docker.service) and the
commands the units run that the OS provides, from Debian 12's systemd on this machine, or, where this machine has no
systemd-analyze, in the emulated host's image (tests/nodeboot/emulated_host.py). A script a unit runs is there only
if the user data writes it, so "not executable" or "missing" is a real finding.
"""

from __future__ import annotations

import base64
import copy
import gzip
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from goldenenv import nodeboot, stackconfig
from goldenenv.plan import plan_config, stack_file

REPO = Path(__file__).resolve().parents[2]
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (REPO / "stacks").glob("Pulumi.*.yaml"))
REF = "registry.example.com/goldenenv@sha256:" + "0123456789abcdef" * 4
"""A pushed golden image, so the stacks' hosts run their container (the units `up` delivers)."""
EXEC = re.compile(r"^Exec[A-Za-z]*=[-@:+!]*(\S+)", re.M)
VERIFY = r"""set -eu
root=$1; shift
mkdir -p "$root/usr/lib/systemd" "$root/usr/bin" "$root/usr/sbin"
ln -sfn usr/bin "$root/bin"; ln -sfn usr/sbin "$root/sbin"; ln -sfn usr/lib "$root/lib"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
for command in $HOST_COMMANDS; do
  if [ -e "$command" ] && [ ! -e "$root$command" ]; then mkdir -p "$root$(dirname "$command")"; cp -L "$command" "$root$command"; fi
done
exec systemd-analyze verify --root="$root" "$@"
"""
"""Assemble the node's root (the OS's units and commands beside the stack's files) and verify the units in it."""


def write_files(document: str | bytes) -> list[dict]:
    """The files a cloud-config writes, decoded as cloud-init decodes them (a gzipped document, b64 / gz+b64)."""
    if isinstance(document, bytes):
        document = gzip.decompress(document).decode() if document[:2] == b"\x1f\x8b" else document.decode()
    files = []
    for entry in yaml.safe_load(document)["write_files"]:
        content = entry.get("content", "")
        encoding = entry.get("encoding", "")
        if encoding in ("b64", "base64"):
            content = base64.b64decode(content).decode()
        elif encoding in ("gz+b64", "gzip+base64", "gz+base64", "gzip+b64"):
            content = gzip.decompress(base64.b64decode(content)).decode()
        elif encoding in ("gz", "gzip"):
            content = gzip.decompress(content if isinstance(content, bytes) else content.encode()).decode()
        files.append({"path": entry["path"], "mode": int(str(entry.get("permissions", "0644")), 8),
                      "content": content})
    return files


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[list[dict]]]:
    """Stack -> the files of each user data its plan renders (the head's and each pool's)."""
    original = nodeboot.user_data
    out: dict[str, list[list[dict]]] = {}
    documents: list = []

    def recorded(*args, **kwargs):
        document = original(*args, **kwargs)
        documents.append(document)
        return document

    nodeboot.user_data = recorded
    try:
        for stack in STACKS:
            documents.clear()
            config = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
            config["goldenenv:image"] = {**(config.get("goldenenv:image") or {}), "ref": REF}
            plan_config(stack, config)
            out[stack] = [write_files(d) for d in documents]
    finally:
        nodeboot.user_data = original
    return out


def verifier() -> list[str]:
    """How to run the VERIFY script: this machine's systemd-analyze, else the emulated host's image (Debian 12's
    systemd), built the way tests/nodeboot builds it."""
    if shutil.which("systemd-analyze"):
        return ["bash", "-c", VERIFY, "verify"]
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:  # noqa: BLE001 - any engine failure means the same: nowhere to run systemd's verifier
        pytest.skip(f"no systemd-analyze on this machine and no Docker engine to run it in: {e}")
    sys.path.insert(0, str(REPO / "tests" / "nodeboot"))
    import emulated_host
    import emulated_stack

    image = emulated_host.host_image(client, emulated_stack.golden_base(client))
    return ["docker", "run", "--rm", "-i", "-v", "{root}:{root}", "-e", "HOST_COMMANDS", image,
            "bash", "-c", VERIFY, "verify"]


def verify(files: list[dict], root: Path) -> subprocess.CompletedProcess:
    units = [f["path"] for f in files if f["path"].startswith(f"{nodeboot.UNIT_DIR}/")]
    written = {f["path"] for f in files}
    for f in files:
        path = root / f["path"].lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f["content"])
        path.chmod(f["mode"])
    commands = {c for f in files if f["path"] in units for c in EXEC.findall(f["content"])} - written
    command = [word.format(root=root) for word in verifier()] + [str(root), *units]
    return subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOST_COMMANDS": " ".join(sorted(commands))})


def test_every_shipped_cloud_stack_renders_units(rendered):
    """The rule below has something to hold: each cloud's shipped stacks deliver units (the local stack runs
    containers, not hosts, and renders none)."""
    for stack, documents in rendered.items():
        if stackconfig.read_stack_file(stack_file(stack))["goldenenv:cloud"] == "local":
            continue
        assert documents and all(any(f["path"].startswith(f"{nodeboot.UNIT_DIR}/") for f in files)
                                 for files in documents), stack


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_unit_passes_systemd_analyze_verify_without_a_warning(rendered, stack, tmp_path):
    for i, files in enumerate(rendered[stack]):
        root = tmp_path / f"host{i}"
        result = verify(files, root)
        report = (result.stdout + result.stderr).replace(str(root), "")
        assert result.returncode == 0 and not report.strip(), f"{stack}, user data {i + 1}:\n{report}"


def test_the_verifier_finds_a_unit_whose_script_the_user_data_does_not_write(rendered, tmp_path):
    """The root holds only what the user data writes: a unit whose script is missing is a finding, not noise."""
    files = rendered["aws-p5-2node"][-1]
    unit = next(f for f in files if f["path"].endswith(nodeboot.SCRATCH_UNIT))
    script = EXEC.search(unit["content"]).group(1)
    result = verify([f for f in files if f["path"] != script], tmp_path)
    assert f"{script} is not executable" in result.stdout + result.stderr

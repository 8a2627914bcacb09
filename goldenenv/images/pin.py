"""Resolve top-level requirements into hash-pinned lock entries, with pip doing the resolving.

`pip install --dry-run --report` resolves for the image's platform and Python (not this
machine's) and reports every distribution with the sha256 of the exact file it chose.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name

from goldenenv.images.lock import GROUPS, Lock, Pin

GLIBC_MINOR = 35
"""Oldest glibc among the supported bases (Ubuntu 22.04: 2.35; Debian 12: 2.36)."""


def platforms(glibc_minor: int = GLIBC_MINOR) -> list[str]:
    """Every manylinux tag a base with this glibc can run, newest first."""
    tags = [f"manylinux_2_{m}_x86_64" for m in range(glibc_minor, 4, -1)]
    return tags + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


@dataclass(frozen=True)
class Resolved:
    name: str
    version: str
    sha256: str
    source: str


def resolve(requirements: list[str], python: str, wheelhouse: Path | None = None,
            index_url: str | None = None) -> list[Resolved]:
    """The full closure of `requirements` for CPython `python` on x86_64 Linux, binary wheels only."""
    tag = python.replace(".", "")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
            "--report", str(report), "--only-binary=:all:",
            "--python-version", python, "--implementation", "cp", "--abi", f"cp{tag}", "--abi", "abi3", "--abi", "none",
        ]
        for platform in platforms():
            cmd += ["--platform", platform]
        if wheelhouse:
            cmd += ["--find-links", str(wheelhouse)]
        if index_url:
            cmd += ["--index-url", index_url]
        done = subprocess.run(cmd + list(requirements), capture_output=True, text=True)
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")] or done.stderr.splitlines()[-3:]
            raise RuntimeError("pip could not resolve the requirements: " + " ".join(lines))
        items = json.loads(report.read_text())["install"]
    return sorted(
        (Resolved(canonicalize_name(i["metadata"]["name"]), i["metadata"]["version"],
                  i["download_info"]["archive_info"]["hashes"]["sha256"], i["download_info"]["url"])
         for i in items),
        key=lambda r: r.name,
    )


def pin(lock: Lock, wheelhouse: Path | None = None, index_url: str | None = None) -> dict[str, Pin]:
    """Every distribution the lock's layers need, each in the first layer that asks for it.

    NVIDIA's CUDA library wheels always go in the cuda layer: large, and rarely changed. A
    top-level pin published only as a source distribution (DeepSpeed) is pinned by its sdist
    hash without its dependencies: list those in `requirements` so they resolve as wheels.
    """
    asked = lock.top_level()
    sdists = {}
    for group in GROUPS:
        for req in list(asked[group]):
            found = sdist_only(req, index_url or PYPI)
            if found:
                sdists[found.name] = (found, group)
                asked[group].remove(req)
    wanted = [req for group in GROUPS for req in asked[group]]
    final = {r.name: r for r in resolve(wanted, lock.python, wheelhouse, index_url)}
    layer: dict[str, str] = {name: group for name, (_, group) in sdists.items()}
    final.update({name: r for name, (r, _) in sdists.items()})
    so_far: list[str] = []
    for group in GROUPS:
        if not asked[group]:
            continue
        so_far += asked[group]
        for r in resolve(so_far, lock.python, wheelhouse, index_url):
            layer.setdefault(r.name, group)
    return {
        name: Pin(version=r.version, sha256=[r.sha256],
                  group="cuda" if name.startswith("nvidia-") else layer.get(name, "project"))
        for name, r in sorted(final.items())
    }


PYPI = "https://pypi.org/simple"


def sdist_only(requirement: str, index_url: str) -> Resolved | None:
    """`name==version` whose release has no wheel at all: its sdist, by the index's JSON API (PEP 691)."""
    name, sep, version = requirement.partition("==")
    if not sep:
        return None
    url = f"{index_url.rstrip('/')}/{canonicalize_name(name)}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.load(response)["files"]
    except (OSError, ValueError, KeyError):
        return None
    release = [f for f in files if _file_version(f["filename"], name) == version]
    if not release or any(f["filename"].endswith(".whl") for f in release):
        return None
    sdist = next((f for f in release if f["filename"].endswith((".tar.gz", ".zip"))), None)
    if sdist is None:
        return None
    return Resolved(canonicalize_name(name), version, sdist["hashes"]["sha256"], sdist["url"])


def _file_version(filename: str, name: str) -> str | None:
    stem = filename.removesuffix(".tar.gz").removesuffix(".zip").removesuffix(".whl")
    prefix = canonicalize_name(name).replace("-", "_")
    for candidate in (prefix, name, name.replace("-", "_")):
        if stem.lower().startswith(candidate.lower() + "-"):
            return stem[len(candidate) + 1:].split("-", 1)[0]
    return None


def write_packages(path: Path, packages: dict[str, Pin]) -> None:
    """Replace the generated `packages:` section at the end of a lock file, keeping the rest as written."""
    text = path.read_text(encoding="utf-8")
    head, marker, _ = text.partition(PACKAGES_MARKER)
    if not marker:
        head = text.rstrip("\n") + "\n\n"
    body = yaml.safe_dump(
        {"packages": {n: p.model_dump(mode="json", by_alias=True) for n, p in packages.items()}},
        sort_keys=False, default_flow_style=None, width=200,
    )
    path.write_text(head + PACKAGES_MARKER + body, encoding="utf-8")


PACKAGES_MARKER = "# --- generated by `goldenenv image pin`: every distribution, with its hashes ---\n"

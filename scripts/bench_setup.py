"""How long a newcomer's set-up takes, for the README's main command and for the tests, against a bare pip install.

Run: python3 scripts/bench_setup.py [--pip-fallback] [--before REV]   (5 to 10 minutes on 2 cores; needs PyPI)

Each run is a fresh clone of this checkout's HEAD in a temporary folder, with empty package caches of its own
(PIP_CACHE_DIR, UV_CACHE_DIR: every download is cold; the operating system's file cache is not emptied), its output
read through a pipe as CI reads it:
  main              ./scripts/setup.sh: what the README's main command installs (no cloud's provider)
  again             the same clone once more, pyproject.toml unchanged (it should do nothing)
  tests             ./scripts/setup.sh --test: what ./scripts/test.sh installs (every cloud, the test extra)
  bare pip, main    python3 -m venv, then pip install of main's pins from pyproject.toml, as pip does by default
  bare pip, tests   the same with the pins of the test extra and every cloud
  pip fallback      with --pip-fallback: ./scripts/setup.sh --test with GOLDENENV_INSTALLER=pip
  before            with --before REV: the setup.sh of an earlier commit (e.g. 965f735, which installed every cloud)
For each: wall seconds, the longest silence between two lines of output, the exit status and the virtualenv's size;
then each set-up as a ratio of the bare pip install of the same pins (main also of before's). Nothing outside the temporary folder is touched;
it is removed at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """(seconds, longest silence in seconds, exit status) of a command whose output is read through a pipe."""
    started = last = time.monotonic()
    silence = 0.0
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as process:
        for _ in process.stdout:
            now = time.monotonic()
            silence, last = max(silence, now - last), now
    return time.monotonic() - started, max(silence, time.monotonic() - last), process.returncode


def cold(caches: Path, **extra: str) -> dict[str, str]:
    """This environment with package caches of its own, empty at first."""
    return {**os.environ, "PIP_CACHE_DIR": str(caches / "pip"), "UV_CACHE_DIR": str(caches / "uv"), **extra}


def clone(into: Path, rev: str | None = None) -> Path:
    subprocess.run(["git", "clone", "--quiet", "--local", str(ROOT), str(into)], check=True)
    if rev:
        subprocess.run(["git", "-C", str(into), "checkout", "--quiet", rev], check=True)
    return into


def pins(checkout: Path, extras: list[str]) -> list[str]:
    """The requirements pyproject.toml pins for goldenenv with these extras (and the extras they name)."""
    spec = importlib.util.spec_from_file_location("extras", checkout / "scripts" / "lib" / "extras.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    project = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    names = set().union(*(module.covered(e, optional) for e in extras)) if extras else set()
    return project["dependencies"] + [r for e in optional if e in names for r in optional[e]
                                      if not module.SELF.match(r.replace(" ", ""))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pip-fallback", action="store_true", help="also time setup.sh --test with pip (minutes)")
    parser.add_argument("--before", metavar="REV", help="also time the setup.sh of this earlier commit, cold")
    args = parser.parse_args()
    rows: dict[str, tuple[float, float, int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="goldenenv-bench-setup-") as scratch:
        scratch = Path(scratch)

        def measure(label: str, command: list[str], cwd: Path, env: dict[str, str], venv: Path) -> None:
            seconds, silence, code = timed(command, cwd, env)
            rows[label] = (seconds, silence, code, size_mb(venv) if venv.exists() else 0.0)
            print(f"{label:<16} {seconds:7.1f} s   longest silence {silence:5.1f} s   exit {code}   "
                  f".venv {rows[label][3]:6.0f} MB", flush=True)

        def bare_pip(label: str, extras: list[str]) -> None:
            """pip's own default install (it byte-compiles) of the clone's pins, into a new virtualenv."""
            folder = scratch / label.replace(" ", "-").replace(",", "")
            folder.mkdir()
            venv = folder / "venv"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            measure(label, [str(venv / "bin" / "pip"), "install", "--progress-bar", "off",
                            *pins(main_clone, extras)], folder, cold(folder / "caches"), venv)

        main_clone = clone(scratch / "main")
        measure("main", ["./scripts/setup.sh"], main_clone, cold(scratch / "caches-main"), main_clone / ".venv")
        measure("again", ["./scripts/setup.sh"], main_clone, cold(scratch / "caches-main"), main_clone / ".venv")
        tests_clone = clone(scratch / "tests")
        measure("tests", ["./scripts/setup.sh", "--test"], tests_clone, cold(scratch / "caches-tests"),
                tests_clone / ".venv")
        bare_pip("bare pip, main", [])
        bare_pip("bare pip, tests", ["test"])
        if args.pip_fallback:
            fallback = clone(scratch / "pip-fallback")
            measure("pip fallback", ["./scripts/setup.sh", "--test"], fallback,
                    cold(scratch / "caches-fallback", GOLDENENV_INSTALLER="pip"), fallback / ".venv")
        if args.before:
            before = clone(scratch / "before", args.before)
            measure("before", ["./scripts/setup.sh"], before, cold(scratch / "caches-before"), before / ".venv")
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end; caches cold, file cache not")
    for setup, bare in (("main", "bare pip, main"), ("tests", "bare pip, tests"), ("pip fallback", "bare pip, tests"),
                        ("main", "before")):
        if setup in rows and bare in rows:
            (s, _, _, s_mb), (b, _, _, b_mb) = rows[setup], rows[bare]
            print(f"{setup} / {bare}: {s / b:.2f} of the time, {s_mb / b_mb:.2f} of the size", flush=True)
    if "main" in rows and "tests" in rows:
        print(f"main / tests: {rows['main'][0] / rows['tests'][0]:.2f} of the time, "
              f"{rows['main'][3] / rows['tests'][3]:.2f} of the size")
    return 0 if all(code == 0 for _, _, code, _ in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""How long a newcomer's `./scripts/setup.sh` takes, and how long it stays silent, with uv and with pip.

Run: python3 scripts/bench_setup.py [--skip-pip] [--before REV]   (about 3 minutes on 2 cores; needs PyPI)

Each run is a fresh clone of this checkout's HEAD in a temporary folder, with empty package caches of its own
(PIP_CACHE_DIR, UV_CACHE_DIR), its output read through a pipe as CI reads it:
  1. uv, cold        the README's set-up on a new machine
  2. again           the same clone once more, pyproject.toml unchanged (it should do nothing)
  3. uv, warm cache  a new clone, the first run's caches kept (a second checkout on the same machine)
  4. pip, cold       GOLDENENV_INSTALLER=pip, the fallback where uv cannot be installed (--skip-pip leaves it out)
  5. before, cold    with --before REV: the setup.sh of an earlier commit, e.g. 118a8c6 (pip, byte-compiled)
For each: wall seconds, the longest silence between two lines of output, and the virtualenv's size; then pip cold and
the earlier commit's as ratios of uv cold. Nothing outside the temporary folder is touched; it is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def set_up(clone: Path, caches: Path, installer: str) -> tuple[float, float, int]:
    """(seconds, longest silence in seconds, exit status) of one setup.sh run read through a pipe."""
    env = {**os.environ, "PIP_CACHE_DIR": str(caches / "pip"), "UV_CACHE_DIR": str(caches / "uv"),
           "GOLDENENV_INSTALLER": installer}
    started = last = time.monotonic()
    silence = 0.0
    with subprocess.Popen(["./scripts/setup.sh"], cwd=clone, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as process:
        for _ in process.stdout:
            now = time.monotonic()
            silence, last = max(silence, now - last), now
    return time.monotonic() - started, max(silence, time.monotonic() - last), process.returncode


def clone(into: Path, rev: str | None = None) -> Path:
    subprocess.run(["git", "clone", "--quiet", "--local", str(ROOT), str(into)], check=True)
    if rev:
        subprocess.run(["git", "-C", str(into), "checkout", "--quiet", rev], check=True)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-pip", action="store_true", help="leave out the pip fallback's run (about 2 minutes)")
    parser.add_argument("--before", metavar="REV", help="also time the setup.sh of this earlier commit, cold")
    args = parser.parse_args()
    rows: dict[str, tuple[float, float, int, float]] = {}
    with tempfile.TemporaryDirectory(prefix="goldenenv-bench-setup-") as scratch:
        scratch = Path(scratch)

        def measure(label: str, checkout: Path, caches: Path, installer: str = "uv") -> None:
            seconds, silence, code = set_up(checkout, caches, installer)
            rows[label] = (seconds, silence, code, size_mb(checkout / ".venv"))
            print(f"{label:<16} {seconds:7.1f} s   longest silence {silence:5.1f} s   exit {code}   "
                  f".venv {rows[label][3]:6.0f} MB", flush=True)

        first = clone(scratch / "uv-cold")
        measure("uv, cold", first, scratch / "caches-uv")
        measure("again", first, scratch / "caches-uv")
        measure("uv, warm cache", clone(scratch / "uv-warm"), scratch / "caches-uv")
        if not args.skip_pip:
            measure("pip, cold", clone(scratch / "pip-cold"), scratch / "caches-pip", installer="pip")
        if args.before:
            measure("before, cold", clone(scratch / "before", args.before), scratch / "caches-before")
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end")
    if "pip, cold" in rows:
        print(f"pip cold / uv cold: {rows['pip, cold'][0] / rows['uv, cold'][0]:.1f}")
    if "before, cold" in rows:
        print(f"{args.before} cold / uv cold: {rows['before, cold'][0] / rows['uv, cold'][0]:.1f}")
    return 0 if all(code == 0 for _, _, code, _ in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

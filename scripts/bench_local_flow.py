"""Wall time of the local flow, split by phase (the README's main job).

    .venv/bin/python scripts/bench_local_flow.py [--cold] [--steps 120]

--cold removes the stack's golden image first, so the image phase includes the build (the bootstrapped
base is kept). Prints one row per phase and each phase's share of the total.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import docker
from rich.console import Console

from goldenenv import lifecycle
from goldenenv.flow import run_flow
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import load

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", action="store_true", help="rebuild the golden image first")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--stack", default="local")
    args = parser.parse_args()
    client = docker.from_env()
    spec = lifecycle.load_spec(args.stack)
    if args.cold:
        tag = load(spec.image.lock).tag
        try:
            client.images.remove(tag, force=True)
        except docker.errors.ImageNotFound:
            pass
    report = run_flow(spec, BuildOptions.from_environment(), ROOT / "examples", args.steps, console=Console(quiet=True), client=client)
    total = sum(p.seconds for p in report.phases)
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, docker {client.version()['Version']}, "
          f"{'cold' if args.cold else 'warm'} image, {args.steps} training steps")
    print(f"{'phase':10} {'seconds':>8} {'share':>6}  result")
    for p in report.phases:
        print(f"{p.name:10} {p.seconds:8.1f} {p.seconds / total:6.0%}  {'ok' if p.ok else 'FAILED'}: {p.note}")
    print(f"{'total':10} {total:8.1f}")
    raise SystemExit(0 if report.ok else 1)


if __name__ == "__main__":
    main()

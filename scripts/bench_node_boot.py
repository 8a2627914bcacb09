"""How long a shipped cloud stack's node takes to boot into its golden container, and to come back after a stop/start,
on the emulated host the node-boot tests use (Debian 12 systemd + cloud-init in a container, this machine's engine).

    .venv/bin/python scripts/bench_node_boot.py [--stack aws-p5-2node ...]

Per stack, one run: first boot (systemd up, cloud-init writes and enables the units, scratch, mounts, pull by digest
from a local registry, container up) and a stop/start (units again, a new container), with the stop/start as a ratio
of the first boot. The golden image is already on this machine's engine (its layers are not pulled again), so the
figures are the boot's own work, not a pull over a network.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "nodeboot"))

import emulated_host  # noqa: E402
import emulated_stack  # noqa: E402

STACKS = ["aws-g5-dev", "aws-p5-2node", "aws-p4d-4node-spot", "alicloud-gn7i-dev", "alicloud-ebmgn8v-2node"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", action="append", choices=STACKS, help="default: every shipped cloud stack")
    args = parser.parse_args()
    client = docker.from_env()
    base = emulated_stack.golden_base(client)
    image = emulated_host.host_image(client, base)
    registry, url = emulated_stack.start_registry(client, base)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ref = emulated_stack.publish_golden(client, url, Path(tmp) / "published")
            key = emulated_stack.make_key(Path(tmp))
            for stack in args.stack or STACKS:
                start = time.monotonic()
                node = emulated_stack.boot(client, image, stack, ref, key, Path(tmp) / stack)
                try:
                    node.up(timeout=300)
                    first = time.monotonic() - start
                    start = time.monotonic()
                    node.host.restart()
                    node.up(timeout=300)
                    again = time.monotonic() - start
                finally:
                    node.remove()
                rows.append((stack, first, again))
    finally:
        registry.remove(force=True)
    print(f"node boot on an emulated host, {platform.node()} ({platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores)")
    print(f"{'stack':26} {'first boot s':>13} {'stop/start s':>13} {'ratio':>7}")
    for stack, first, again in rows:
        print(f"{stack:26} {first:13.1f} {again:13.1f} {again / first:7.2f}")


if __name__ == "__main__":
    main()

"""How long a shipped cloud stack's Slurm head and node take to boot into their golden containers, and the node to
come back after a stop/start, on the emulated hosts the node-boot tests use (Debian 12 systemd + cloud-init in a
container, this machine's engine, the emulated cloud's APIs: tests/nodeboot/emulated_cloud.py).

    .venv/bin/python scripts/bench_node_boot.py [--stack aws-p5-2node ...]

Per stack, one run: the stack created on the emulated cloud, its head and first node booted side by side. Head first
boot: until its units are active and slurmctld runs (it writes the munge key to the secret store first). Node first
boot: systemd up, cloud-init writes and enables the units, scratch, mounts, the munge key (retried until the head
wrote it), pull by digest from a local registry, container up. Then a stop/start of the node (units again, a new
container), with the stop/start as a ratio of the node's first boot. The golden image is already on this machine's
engine (its layers are not pulled again), so the figures are the boot's own work, not a pull over a network.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "nodeboot"))

import emulated_cloud  # noqa: E402
import emulated_host  # noqa: E402
import emulated_stack  # noqa: E402

STACKS = emulated_stack.CLOUD_STACKS


def boot_times(client, image: str, stack: str, ref: str, key: dict, folder: Path, apis) -> tuple[float, float, float]:
    """(head first boot, node first boot, node stop/start) in seconds; the first two from the stack's creation."""
    start = time.monotonic()
    booted = emulated_stack.boot(client, image, stack, ref, key, folder, apis)
    try:
        booted.head.up(timeout=300)
        head = time.monotonic() - start
        booted.node.up(timeout=300)
        first = time.monotonic() - start
        start = time.monotonic()
        booted.node.host.restart()
        booted.node.up(timeout=300)
        return head, first, time.monotonic() - start
    finally:
        booted.remove()


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
            (Path(tmp) / "cloud-apis").mkdir()
            apis = emulated_cloud.CloudApis(client, image, Path(tmp) / "cloud-apis")
            try:
                for stack in args.stack or STACKS:
                    rows.append((stack, *boot_times(client, image, stack, ref, key, Path(tmp) / stack, apis)))
            finally:
                apis.remove()
    finally:
        registry.remove(force=True)
    cores = len(os.sched_getaffinity(0))
    print(f"node boot on emulated hosts, {platform.node()} ({platform.machine()}, {cores} cores)")
    print(f"{'stack':26} {'head first boot s':>18} {'node first boot s':>18} {'node stop/start s':>18} {'ratio':>7}")
    for stack, head, first, again in rows:
        print(f"{stack:26} {head:18.1f} {first:18.1f} {again:18.1f} {again / first:7.2f}")


if __name__ == "__main__":
    main()

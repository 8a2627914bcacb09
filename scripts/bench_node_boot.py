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

The node's first boot includes its host layer's install (goldenenv-host-layer.service) where its host image lacks
part of the layer, from the vendors' repositories as tests/nodeboot/apt_stand_in.py serves them (the lock's package
names and versions, signed with a key made for the run): the install's own machinery (key fingerprints, apt's
update, dpkg, holds), not the size of the vendors' real packages or a driver's build. Its time is printed with its
share of the node's first boot.
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

from goldenenv.images import host as host_layer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "nodeboot"))

import apt_stand_in  # noqa: E402
import emulated_cloud  # noqa: E402
import emulated_host  # noqa: E402
import emulated_stack  # noqa: E402

STACKS = emulated_stack.CLOUD_STACKS


def unit_seconds(host, unit: str) -> float:
    """How long a oneshot unit ran on the host, from systemd's own timestamps (0 when the boot has no such unit)."""
    rc, out = host.sh(f"systemctl show {unit} -p InactiveExitTimestampMonotonic -p ActiveEnterTimestampMonotonic")
    stamps = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    began, ended = int(stamps.get("InactiveExitTimestampMonotonic") or 0), int(stamps.get("ActiveEnterTimestampMonotonic") or 0)
    return (ended - began) / 1e6 if rc == 0 and began and ended > began else 0.0


def boot_times(client, image: str, stack: str, ref: str, key: dict, folder: Path,
               apis) -> tuple[float, float, float, float]:
    """(head first boot, node first boot, the node's host-layer install, node stop/start) in seconds; the first two
    from the stack's creation."""
    start = time.monotonic()
    booted = emulated_stack.boot(client, image, stack, ref, key, folder, apis)
    try:
        booted.head.up(timeout=300)
        head = time.monotonic() - start
        booted.node.up(timeout=300)
        first = time.monotonic() - start
        install = unit_seconds(booted.node.host, "goldenenv-host-layer.service")
        start = time.monotonic()
        booted.node.host.restart()
        booted.node.up(timeout=300)
        return head, first, install, time.monotonic() - start
    finally:
        booted.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", action="append", choices=STACKS, help="default: every shipped cloud stack")
    args = parser.parse_args()
    client = docker.from_env()
    base = emulated_stack.golden_base(client)
    image = apt_stand_in.host_image(client, emulated_host.host_image(client, base))
    registry, url = emulated_stack.start_registry(client, base)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ref = emulated_stack.publish_golden(client, url, Path(tmp) / "published")
            key = emulated_stack.make_key(Path(tmp))
            (Path(tmp) / "cloud-apis").mkdir()
            apis = emulated_cloud.CloudApis(client, image, Path(tmp) / "cloud-apis")
            try:
                stand_in = apt_stand_in.start(client, image, Path(tmp) / "apt", apis.authority,
                                              host_layer.load_host("ubuntu-gpu"))
                try:
                    with apt_stand_in.serving(stand_in, apis.authority):
                        for stack in args.stack or STACKS:
                            rows.append((stack, *boot_times(client, image, stack, ref, key, Path(tmp) / stack,
                                                            apis)))
                finally:
                    stand_in.remove()
            finally:
                apis.remove()
    finally:
        registry.remove(force=True)
    cores = len(os.sched_getaffinity(0))
    print(f"node boot on emulated hosts, {platform.node()} ({platform.machine()}, {cores} cores)")
    print(f"{'stack':26} {'head first boot s':>18} {'node first boot s':>18} {'host layer s':>13} {'share':>6} "
          f"{'node stop/start s':>18} {'ratio':>7}")
    for stack, head, first, install, again in rows:
        print(f"{stack:26} {head:18.1f} {first:18.1f} {install:13.1f} {install / first:6.2f} {again:18.1f} "
              f"{again / first:7.2f}")


if __name__ == "__main__":
    main()

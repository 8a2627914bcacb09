"""Benchmark golden image builds on this machine's Docker engine (classic builder).

Run: .venv/bin/python scripts/bench_images.py [--images cpu-dev,cuda-slim]
     .venv/bin/python scripts/bench_images.py --sizes   (no builds: every image built here from its current lock,
     with its margin to the lock's maxCompressedGb; exit 1 when one is over)

Figures, all measured in this run:
  1. base bootstrap (debootstrap + docker import) of the first image's bootstrap base, into a scratch tag
  2. cold build per image (nocache=True, base present), with the site's build options
  3. rebuild after bumping one project-layer pin (re-pinned with goldenenv.images.pin), with cache
  4. no-op rebuild (same lock, cache warm)
  5. image size: uncompressed, compressed (`docker save | gzip -1`, streamed), and the largest layers with
     the Dockerfile step that made them (goldenenv.images.size, which `goldenenv plan` reuses)
  6. the builder cache each lock keeps (goldenenv-builder/<name>:<stage>) and the dangling images left

The engine is shared, so nothing here touches the shared tags (goldenenv/<image>:<hash>, goldenenv/base-*):
each image is built from a scratch copy of its lock renamed bench-<image>-<random> (the name only reaches
the last ENV and LABEL steps, so every layer before them is the same as the real image's), and only what
this script created is removed afterwards: its tags, its builder tags and the intermediate images of its
non-cached steps.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import docker
import yaml
from docker.errors import APIError, ImageNotFound

from goldenenv.images import pin, size
from goldenenv.images.base import bootstrap, ensure_base
from goldenenv.images.build import STEP, Built, build, builder_images
from goldenenv.images.dockerfile import BuildOptions, dockerfile
from goldenenv.images.lock import IMAGES, Lock, load, names

MB = 1e6
NEW_ID = re.compile(r"^ ---> ([0-9a-f]{12,64})\s*$")



# --- a client that remembers the images its builds created (so only those are removed) ---

class _RecordingApi:
    def __init__(self, api, created: list[str]):
        self._api, self._created = api, created
        self.steps: list[list] = []
        """The last build's steps: [number, instruction, cached]."""

    def __getattr__(self, name):
        return getattr(self._api, name)

    def build(self, **kwargs):
        cached = from_step = False
        self.steps = []
        for chunk in self._api.build(**kwargs):
            for line in chunk.get("stream", "").splitlines():
                step = STEP.match(line)
                if step:
                    cached, from_step = False, step.group(3).upper().startswith("FROM ")
                    self.steps.append([int(step.group(1)), step.group(3).strip(), False])
                elif "Using cache" in line:
                    cached = True
                    if self.steps:
                        self.steps[-1][2] = True
                else:
                    new = NEW_ID.match(line)
                    if new and not cached and not from_step:
                        self._created.append(new.group(1))
            yield chunk


class RecordingClient:
    def __init__(self, client: docker.DockerClient):
        self._client = client
        self.created: list[str] = []
        self.api = _RecordingApi(client.api, self.created)

    def __getattr__(self, name):
        return getattr(self._client, name)


def cleanup(client: docker.DockerClient, tags: list[str], created: list[str], name: str) -> list[str]:
    """Remove this run's tags and the builder stages kept for `name`, then its untagged intermediate images
    that nothing else builds on."""
    problems = []
    for tag in [*tags, *builder_images(client, name)]:
        try:
            client.images.remove(tag)
        except ImageNotFound:
            pass
        except APIError as e:
            problems.append(f"{tag}: {e.explanation}")
    for image_id in reversed(dict.fromkeys(created)):
        try:
            if client.images.get(image_id).tags:  # tagged by someone else meanwhile: not ours to remove
                continue
            client.images.remove(image_id)
        except (ImageNotFound, APIError):  # gone with its child, or another image builds on it
            pass
    return problems


# --- scratch locks ---

def scratch_lock(image: str, bench_name: str, root: Path,
                 edit: Callable[[dict], None] | None = None, repin: bool = False,
                 options: BuildOptions = BuildOptions()) -> Lock:
    """images/<image>/ copied to root/images/<bench_name>/, renamed, optionally edited and re-pinned."""
    target = root / "images" / bench_name
    shutil.copytree(IMAGES / image, target)
    lock_file = target / "lock.yaml"
    head, marker, packages = lock_file.read_text(encoding="utf-8").partition(pin.PACKAGES_MARKER)
    doc = yaml.safe_load(head)
    doc["name"] = bench_name
    if edit:
        edit(doc)
    lock_file.write_text(yaml.safe_dump(doc, sort_keys=False) + "\n" + marker + packages, encoding="utf-8")
    if repin:
        pin.write_packages(lock_file, pin.pin(load(bench_name, root / "images"), options.wheelhouse))
    return load(bench_name, root / "images")


def previous_release(package: str, current: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package],
                          capture_output=True, text=True, check=True)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("Available versions:"))
    versions = [v.strip() for v in line.split(":", 1)[1].split(",")]
    return versions[versions.index(current) + 1]


def bump_for(image: str, lock: Lock) -> tuple[str, Callable[[dict], None]]:
    """One project-layer pin to change: numpy 2.3.4 → 2.3.5 for cpu-dev, else pip → its previous release."""
    project = list(lock.requirements.get("project", []))
    if image == "cpu-dev" and "numpy==2.3.4" in project:
        old, new, label = "numpy==2.3.4", "numpy==2.3.5", "numpy 2.3.4->2.3.5"
    else:
        current = lock.packages["pip"].version
        old = next(r for r in project if re.split(r"[=<>!~ ;\[]", r, maxsplit=1)[0] == "pip")
        previous = previous_release("pip", current)
        new, label = f"pip=={previous}", f"pip {current}->{previous}"

    def edit(doc: dict) -> None:
        reqs = doc["requirements"]["project"]
        reqs[reqs.index(old)] = new

    return label, edit


# --- measurements ---

def sizes(client: docker.DockerClient, tag: str, text: str, largest: int = 3) -> dict:
    """Uncompressed and `docker save | gzip -1` bytes, and the largest layers named by their Dockerfile lines."""
    image = client.images.get(tag)
    started = time.monotonic()
    compressed = size.compressed_bytes(client, tag)
    return {"bytes": size.uncompressed_bytes(image), "gz": compressed, "gz_s": time.monotonic() - started,
            "layers": size.largest_layers(image, largest, text)}


def dangling_of(client: docker.DockerClient, ancestor: str) -> list[str]:
    """Dangling images built on `ancestor` (an image of this run): what a build left untagged."""
    found = []
    for image in client.images.list(filters={"dangling": True}):
        parent = image.id
        while parent and parent != ancestor:
            parent = client.api.inspect_image(parent).get("Parent")
        if parent == ancestor:
            found.append(image.id)
    return found


def builder_cache(client: docker.DockerClient, name: str, tag: str) -> int:
    """Bytes the kept builder stages of `name` hold beyond the layers of image `tag` (what clearing them frees)."""
    steps = {entry["Id"]: entry.get("Size", 0) for kept in builder_images(client, name)
             for entry in client.api.history(kept)}
    for entry in client.api.history(tag):
        steps.pop(entry["Id"], None)
    return sum(steps.values())


def bench_base(client: docker.DockerClient, lock: Lock) -> float:
    spec = lock.base.bootstrap
    scratch = f"goldenenv/bench-base:{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    try:
        bootstrap(client, spec, scratch, spec.mirror)
        return time.monotonic() - started
    finally:
        try:
            client.images.remove(scratch)
        except ImageNotFound:
            pass


def bench_image(client: docker.DockerClient, image: str, options: BuildOptions, root: Path) -> dict:
    real = load(image)
    recorder = RecordingClient(client)
    bench_name = f"bench-{image}-{uuid.uuid4().hex[:8]}"
    quiet = lambda text: None  # noqa: E731
    ensure_base(client, real.base, options.apt_mirror, log=print)  # base present before the cold build
    lock = scratch_lock(image, bench_name, root / "plain")
    tags = [lock.tag]
    try:
        cold = build(lock, options, recorder, log=quiet, nocache=True)
        noop = build(lock, options, recorder, log=quiet)
        measured = sizes(client, lock.tag, dockerfile(lock, "base:ref"))
        label, edit = bump_for(image, real)
        pin_started = time.monotonic()
        bumped = scratch_lock(image, bench_name, root / "bumped", edit, repin=True, options=options)
        pin_seconds = time.monotonic() - pin_started
        tags.append(bumped.tag)
        rebuilt = build(bumped, options, recorder, log=quiet)
        run_steps = recorder.api.steps
        from_steps = sum(1 for _, text, _ in run_steps if text.upper().startswith("FROM "))
        first_miss = next((f"step {n}: {text}" for n, text, hit in run_steps
                           if not hit and not text.upper().startswith("FROM ")), "none")
        cache = builder_cache(client, bench_name, bumped.tag)
        left = dangling_of(client, next(iter(cold.stages.values())))  # built on this run's first stage
        kept = len(builder_images(client, bench_name))
    finally:
        problems = cleanup(client, tags, recorder.created, bench_name)
        for p in problems:
            print(f"  cleanup: {p}", file=sys.stderr)
    return {"image": image, "cold": cold, "noop": noop, "rebuilt": rebuilt, "bump": label,
            "pin_s": pin_seconds, "from_steps": from_steps, "first_miss": first_miss, **measured,
            "builder_cache": cache, "builders_kept": kept, "dangling": len(left)}


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def steps(b: Built) -> str:
    return f"{b.cached_steps}/{b.steps}"


def report_sizes(client: docker.DockerClient, images: list[str]) -> int:
    """Size of every image built on this engine from the current locks (no build): uncompressed, gzip-1, the
    margin to the lock's limit, the largest layers, and for a lock that extends a stem the bytes it shares."""
    started = time.monotonic()
    print(f"{'image':<14} {'size MB':>8} {'gzip-1 MB':>9} {'ratio':>6} {'gzip s':>6}  limit (lock maxCompressedGb)")
    over = 0
    for name in images:
        lock = load(name)
        try:
            image = client.images.get(lock.tag)
        except ImageNotFound:
            print(f"{name:<14} not built on this engine: goldenenv image build {name}")
            continue
        measured = sizes(client, lock.tag, dockerfile(lock, "base:ref"), largest=4)
        over += bool(lock.max_compressed_gb and measured["gz"] > lock.max_compressed_gb * 1e9)
        print(f"{name:<14} {measured['bytes'] / MB:>8.0f} {measured['gz'] / MB:>9.0f} "
              f"{ratio(measured['bytes'], measured['gz']):>6} {measured['gz_s']:>6.1f}  "
              f"{size.over_limit(measured['gz'], lock.max_compressed_gb)}")
        for i, layer in enumerate(measured["layers"], 1):
            print(f"  largest layer {i}: {layer.size / MB:>7.0f} MB ({100 * layer.size / measured['bytes']:.0f}%) "
                  f"{layer.step[:100]}")
        if lock.extends:
            try:
                stem = client.images.get(load(lock.extends).tag)
            except ImageNotFound:
                print(f"  extends {lock.extends}, which is not built here: shared bytes not measured")
                continue
            shared = size.shared_bytes(image, stem)
            print(f"  {shared / MB:.0f} MB ({100 * shared / measured['bytes']:.1f}%) are {lock.extends}'s layers; "
                  f"its own layers: {(measured['bytes'] - shared) / MB:.0f} MB")
    print(f"total {time.monotonic() - started:.0f}s (size = uncompressed, as `docker images`; gzip-1 = "
          "`docker save | gzip -1`, streamed through zlib level 1, what a registry push and a node's pull move; "
          "GB = 10^9 bytes)")
    return 1 if over else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", default="cpu-dev,cuda-slim")
    parser.add_argument("--sizes", action="store_true",
                        help="only measure the images already built from every lock (or --images): no builds")
    args = parser.parse_args(argv)
    images = [n.strip() for n in args.images.split(",") if n.strip()]
    started = time.monotonic()
    client = docker.from_env()
    if args.sizes:
        chosen = images if "--images" in (argv if argv is not None else sys.argv) else names()
        return report_sizes(client, chosen)
    options = BuildOptions.from_environment()

    first = load(images[0])
    base_s = bench_base(client, first) if first.base.bootstrap else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="goldenenv-bench-") as tmp:
        for image in images:
            rows.append(bench_image(client, image, options, Path(tmp) / image))

    engine = client.version()
    print(f"python {platform.python_version()} | docker engine {engine['Version']} (API {engine['ApiVersion']}) | "
          f"docker SDK {metadata.version('docker')} | {os.cpu_count()} CPUs | "
          f"options: ca_cert={options.ca_cert} wheelhouse={options.wheelhouse}")
    if base_s is not None:
        b = first.base.bootstrap
        print(f"base bootstrap ({b.distro} {b.release}, debootstrap + import, scratch tag): {base_s:.1f}s"
              + "".join(f" = {ratio(base_s, r['cold'].seconds)} of {r['image']} cold" for r in rows))
    header = (f"{'image':<10} {'cold s':>7} {'cached':>6} {'noop s':>7} {'noop/cold':>9} {'cached':>6} "
              f"{'bump':<22} {'pin s':>6} {'rebuild s':>9} {'reb/cold':>8} {'cached':>6}")
    print(header)
    for r in rows:
        c, n, b = r["cold"], r["noop"], r["rebuilt"]
        print(f"{r['image']:<10} {c.seconds:>7.1f} {steps(c):>6} {n.seconds:>7.1f} {ratio(n.seconds, c.seconds):>9} "
              f"{steps(n):>6} {r['bump']:<22} {r['pin_s']:>6.1f} {b.seconds:>9.1f} "
              f"{ratio(b.seconds, c.seconds):>8} {steps(b):>6}")
    for r in rows:
        print(f"  {r['image']}: {r['rebuilt'].steps} steps, {r['from_steps']} of them FROM "
              f"(never 'Using cache'); bump rebuild's first uncached {r['first_miss'][:70]}")
    print(f"{'image':<10} {'size MB':>8} {'gzip-1 MB':>9} {'ratio':>6} {'gzip s':>6} "
          f"{'builder cache MB':>16} {'kept':>4} {'dangling':>8}")
    for r in rows:
        print(f"{r['image']:<10} {r['bytes'] / MB:>8.0f} {r['gz'] / MB:>9.0f} {ratio(r['bytes'], r['gz']):>6} "
              f"{r['gz_s']:>6.1f} {r['builder_cache'] / MB:>16.0f} {r['builders_kept']:>4} {r['dangling']:>8}")
    for r in rows:
        for i, layer in enumerate(r["layers"], 1):
            print(f"  {r['image']} largest layer {i}: {layer.size / MB:>7.0f} MB "
                  f"({100 * layer.size / r['bytes']:.0f}%) {layer.step[:90]}")
    print(f"total {time.monotonic() - started:.0f}s (cached = steps 'Using cache' / steps; pin s = re-pin, "
          "not in rebuild s; size = uncompressed, as `docker images`; gzip-1 = `docker save | gzip -1`, streamed "
          "through zlib level 1; ratio = size / gzip-1; builder cache = bytes the kept builder stages "
          "(goldenenv-builder/<name>:<stage>, 'kept' of them) hold beyond the image; dangling = untagged images "
          "the three builds left)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a newcomer's cold image build spends its time, against the physical floor measured in the same run.

Run: .venv/bin/python scripts/bench_first_run.py [--image cpu-dev] [--bootstrapper debootstrap]
     (torch's CPU wheel from PIP_FIND_LINKS=/opt/wheels, as the README's first run has it; about 8 minutes on 2 cores)

The cold build, as a first run does it, stage by stage (each with its seconds and share of the whole), timed by the
build's own progress reporter (goldenenv.progress.Steps, whose lines and heartbeats go to stderr meanwhile):
  bootstrap        the base's root file system from the distribution's packages, downloaded and unpacked by
                   mmdebstrap where installed, else debootstrap (goldenenv.images.base.BOOTSTRAPPERS)
  docker import    tar of that root file system and `docker import` as the base image
  sending context  the build context (the pinned wheels from the wheelhouse among it) to the engine
  each Dockerfile step, grouped by its stage (apt: the .deb download; os: the .deb install and the user; pip: the
                   tool venv; layer-<group>: one pip install per lock group; image: the node tools and the layers
                   copied in), with `after output`: the seconds from a step's last line of output to its new image
                   (the container's exit and the classic builder's commit of its layer: what a big layer costs)
The physical floor, measured in the same run: what no build can avoid on this machine.
  bootstrap        the figure above (the base has to be made)
  apt download     the lock's .debs downloaded alone (apt-get --download-only in a throwaway container, no commit)
  wheel download   the lock's wheels downloaded alone (pip download, hashes checked; torch from the wheelhouse)
  wheel install    those wheels installed alone into a plain venv by the lock's pip, byte-compiled as in the image,
                   in a throwaway container of the base (the image's Python, and the CPU share the engine's
                   containers get; the same install on this machine, outside the engine, is printed beside it)
Then the ratio cold build / floor, and `import torch` timed in a fresh container of the built image (as its user).

The engine is shared, so this follows scripts/bench_images.py's rules: the base is bootstrapped into a scratch tag
(goldenenv/bench-base:<random>), the image is built from a scratch copy of the lock (bench-<image>-<random>) with no
cache, nothing shared (goldenenv/<image>:*, goldenenv/base-*) is touched, and only what this run created is removed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import ImageNotFound

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_images import RecordingClient, cleanup, scratch_lock  # noqa: E402

from goldenenv.images import dockerfile  # noqa: E402
from goldenenv.images import base as base_module  # noqa: E402
from goldenenv.images.base import bootstrap  # noqa: E402
from goldenenv.images.build import build_context  # noqa: E402
from goldenenv.images.dockerfile import BuildOptions  # noqa: E402
from goldenenv.images.lock import GROUPS, Lock, load  # noqa: E402
from goldenenv.progress import Steps  # noqa: E402


@dataclass
class Stage:
    name: str
    seconds: float
    after_output: float


class TimedSteps(Steps):
    """The build's own progress reporter (heartbeats on stderr), keeping every step's seconds."""

    def __init__(self):
        super().__init__(lambda text: print(text, file=sys.stderr, flush=True))
        self.ended: list[Stage] = []

    def end(self, note: str = "") -> float:
        name, after_output = self.current, self.quiet_s() if self.detail else 0.0
        seconds = super().end(note)
        if name is not None:
            self.ended.append(Stage(name, seconds, after_output))
        return seconds


def apt_download(client: docker.DockerClient, lock: Lock, base: str) -> float:
    """The lock's .debs downloaded alone, in a throwaway container of the base (nothing committed)."""
    packages = dockerfile.os_packages(lock)
    if not packages:
        return 0.0
    started = time.monotonic()
    client.containers.run(base, ["sh", "-c", "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install "
                                 "-y -q --no-install-recommends --download-only " + " ".join(packages)],
                          remove=True)
    return time.monotonic() - started


INSTALL_TIMED = """
import glob, subprocess, sys, time
subprocess.run([sys.executable, "-m", "venv", "--without-pip", "/venv"], check=True)
pip = glob.glob("/wheels/pip-*.whl")[0] + "/pip"  # the lock's pip, run from its wheel
started = time.monotonic()
subprocess.run(["/venv/bin/python", pip, "install", "-q", "--no-deps", "--require-hashes", "--no-index",
                "--no-cache-dir", "--find-links", "/wheels", "-r", "/wheels/requirements.txt"], check=True)
print(time.monotonic() - started)
"""
"""The wheel install alone, in a throwaway container of the base: a plain venv, pip byte-compiling as in the image."""


def wheels(client: docker.DockerClient, lock: Lock, options: BuildOptions, base: str,
           folder: Path) -> tuple[float, float, float]:
    """The lock's wheels downloaded alone, then installed alone into a plain venv, in a throwaway container of the
    base (the image's Python, and the engine's share of the CPU), and on this machine:
    (download s, install s in a container, install s here)."""
    wheelhouse = folder / "wheels"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    requirements = wheelhouse / "requirements.txt"
    requirements.write_text("".join(dockerfile.requirements(lock, g) for g in GROUPS if lock.group(g)))
    links = ["--find-links", str(options.wheelhouse)] if options.wheelhouse else []
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    started = time.monotonic()
    subprocess.run([*pip, "download", "--no-deps", "--require-hashes", "--only-binary", ":all:", "--no-cache-dir",
                    *links, "-d", str(wheelhouse), "-r", str(requirements)], check=True, stderr=subprocess.DEVNULL)
    downloaded = time.monotonic() - started
    out = client.containers.run(base, ["python3", "-c", INSTALL_TIMED], remove=True,
                                volumes={str(wheelhouse): {"bind": "/wheels", "mode": "ro"}})
    in_container = float(out.decode().strip().splitlines()[-1])
    subprocess.run([f"python{lock.python}", "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    started = time.monotonic()
    subprocess.run([*pip, "--python", str(folder / "venv/bin/python"), "install", "--no-deps", "--require-hashes",
                    "--no-index", "--no-cache-dir", "--find-links", str(wheelhouse), "-r", str(requirements)],
                   check=True)
    return downloaded, in_container, time.monotonic() - started


def import_torch(client: docker.DockerClient, tag: str, user: str) -> tuple[float, int, int]:
    """Seconds for `python -c "import torch"` in a fresh container of the image, as its user (best of two), and of
    the modules it imports, how many came from a byte-compiled file that matched its source (python -v)."""
    best = float("inf")
    for _ in range(2):
        started = time.monotonic()
        client.containers.run(tag, ["python", "-c", "import torch"], user=user, remove=True)
        best = min(best, time.monotonic() - started)
    verbose = client.containers.run(tag, ["sh", "-c", "python -v -c 'import torch' 2>&1"], user=user,
                                    remove=True).decode()
    sources = sum(1 for line in verbose.splitlines() if line.startswith("# code object from"))
    compiled = sum(1 for line in verbose.splitlines() if line.startswith("# ") and " matches " in line)
    return best, compiled, sources


STAGE = re.compile(r"^step \d+/\d+ ([^:]+):")
"""The Dockerfile stage in a step's name (goldenenv.images.build.step_name)."""


def share(seconds: float, whole: float) -> str:
    return f"{100 * seconds / whole:5.1f}%" if whole else "  n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="cpu-dev")
    parser.add_argument("--bootstrapper", choices=base_module.BOOTSTRAPPERS,
                        help="bootstrap the base with this one (default: the first installed, as a build does)")
    args = parser.parse_args(argv)
    if args.bootstrapper:
        base_module.BOOTSTRAPPERS = (args.bootstrapper,)
    client = docker.from_env()
    options = BuildOptions.from_environment()
    real = load(args.image)
    if not real.base.bootstrap:
        print(f"{args.image} pulls its base ({real.base.image}); this benchmark measures bootstrapped bases")
        return 2
    suffix = uuid.uuid4().hex[:8]
    base = f"goldenenv/bench-base:{suffix}"
    name = f"bench-{args.image}-{suffix}"
    steps = TimedSteps()
    recorder = RecordingClient(client)
    with tempfile.TemporaryDirectory(prefix="goldenenv-bench-first-") as tmp:
        root = Path(tmp)
        lock = scratch_lock(args.image, name, root / "lock")
        try:
            started = time.monotonic()
            bootstrap(client, lock.base.bootstrap, base, lock.base.bootstrap.mirror, steps)
            context = dockerfile.write_context(lock, base, options, root / "context")
            built = build_context(recorder, context, lock.tag, name, dockerfile.build_args(options), nocache=True,
                                  steps=steps)
            cold = time.monotonic() - started
            size = client.images.get(lock.tag).attrs["Size"]
            torch_s = import_torch(client, lock.tag, lock.user) if "torch" in lock.packages else None
            apt_s = apt_download(client, lock, base)
            wheel_download_s, wheel_install_s, host_install_s = wheels(client, lock, options, base, root / "floor")
        finally:
            for problem in cleanup(client, [lock.tag], recorder.created, name):
                print(f"cleanup: {problem}", file=sys.stderr)
            try:
                client.images.remove(base)
            except ImageNotFound:
                pass

    bootstrap_s = steps.ended[0].seconds
    floor = bootstrap_s + apt_s + wheel_download_s + wheel_install_s
    print(f"{args.image} cold build on {os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f} at the end): "
          f"{cold:.0f} s; image {size / 1e6:.0f} MB, {built.steps} Dockerfile steps; wheelhouse {options.wheelhouse}")
    print(f"{'stage / step':<84} {'s':>6} {'share':>6} {'after output':>12}")
    groups: dict[str, float] = {}
    for stage in steps.ended:
        group = STAGE.match(stage.name)
        key = group.group(1) if group else stage.name.split(" ")[0]
        groups[key] = groups.get(key, 0.0) + stage.seconds
        if stage.seconds >= 0.5:
            print(f"  {stage.name:<82.82} {stage.seconds:>6.1f} {share(stage.seconds, cold)} "
                  f"{stage.after_output:>12.1f}")
    for group, seconds in groups.items():
        print(f"{'stage ' + group:<84} {seconds:>6.1f} {share(seconds, cold)}")
    rest = cold - sum(groups.values())
    print(f"{'between steps (the engine between steps, stage tags)':<84} {rest:>6.1f} {share(rest, cold)}")
    print(f"floor: bootstrap {bootstrap_s:.1f} + apt download {apt_s:.1f} + wheel download {wheel_download_s:.1f}"
          f" + wheel install {wheel_install_s:.1f} = {floor:.1f} s")
    print(f"  (wheel install in a throwaway container of the base; the same install into a venv on this machine, "
          f"outside the engine: {host_install_s:.1f} s)")
    print(f"ratio cold build / floor: {cold / floor:.2f}")
    if torch_s is not None:
        seconds, compiled, modules = torch_s
        print(f"import torch in a fresh container as {lock.user}: {seconds:.2f} s (best of 2, container start "
              f"included); {compiled} of {modules} modules from byte-compiled files that match their source")
    return 0


if __name__ == "__main__":
    sys.exit(main())

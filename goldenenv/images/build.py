"""Build a golden image from its lock with the Docker SDK: compatibility first, then the build."""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker

from goldenenv import compat
from goldenenv.images import dockerfile
from goldenenv.images.base import ensure_base
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import Lock

STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")


class BuildError(RuntimeError):
    """The build stopped; `log` holds the output of the step that failed."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class Built:
    tag: str
    image_id: str
    seconds: float
    cached_steps: int
    steps: int


def refusals(lock: Lock, options: BuildOptions) -> list[str]:
    """Why this lock must not be built as it stands."""
    reasons = [c.message for c in compat.check_lock(lock, options.wheelhouse) if c.severity == "error"]
    if lock.unpinned():
        reasons.append(f"not pinned: {', '.join(lock.unpinned())}; run goldenenv image pin {lock.name}")
    if dockerfile.TOOL not in lock.packages:
        reasons.append(f"the lock does not pin {dockerfile.TOOL}: add it to requirements.project and run goldenenv image pin")
    if lock.efa and not lock.efa.installer_sha256:
        reasons.append(f"efa.installerSha256 is not set: the EFA installer {lock.efa.installer} cannot be verified")
    return reasons


def build(lock: Lock, options: BuildOptions = BuildOptions(), client: docker.DockerClient | None = None,
          on_step: Callable[[int, int, str], None] = lambda n, total, text: None,
          log: Callable[[str], None] = print, nocache: bool = False) -> Built:
    reasons = refusals(lock, options)
    if reasons:
        raise BuildError(f"{lock.name}: refusing to build: " + "; ".join(reasons))
    client = client or docker.from_env()
    started = time.monotonic()
    base_ref = ensure_base(client, lock.base, options.apt_mirror, log)
    with tempfile.TemporaryDirectory(prefix=f"goldenenv-{lock.name}-") as tmp:
        context = dockerfile.write_context(lock, base_ref, options, Path(tmp))
        image_id, cached, steps = _stream(client, context, lock.tag, dockerfile.build_args(options), on_step,
                                        nocache)
    return Built(lock.tag, image_id, time.monotonic() - started, cached, steps)


def _stream(client, context: Path, tag: str, buildargs: dict[str, str], on_step,
            nocache: bool = False) -> tuple[str, int, int]:
    step_log: list[str] = []
    current = ""
    cached = total = 0
    image_id = None
    for chunk in client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True,
                                  buildargs=buildargs, nocache=nocache):
        if "error" in chunk:
            raise BuildError(f"build of {tag} failed at {current or 'start'}: {chunk['error'].strip()}",
                             "".join(step_log))
        text = chunk.get("stream", "")
        match = STEP.match(text)
        if match:
            current, total = match.group(0).strip(), int(match.group(2))
            step_log = [text]
            on_step(int(match.group(1)), total, match.group(3).strip())
            continue
        step_log.append(text)
        if "Using cache" in text:
            cached += 1
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
    if image_id is None:
        image_id = client.images.get(tag).id
    return image_id, cached, total

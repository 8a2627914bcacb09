"""Build a golden image from its lock with the Docker SDK: compatibility first, then the build.

The classic builder keeps each stage of a multi-stage build as an image: the builder stages' images are the
layer cache that makes a rebuild after a one-pin bump fast, but left untagged they pile up as dangling images
(a cpu-dev build leaves ~2 GB). So every stage but the last is tagged `goldenenv-builder/<lock name>:<stage>`:
each lock keeps the stages of its latest build, the images they replace are removed (so is the image a
rebuilt tag used to name, when nothing uses it), and a failed build leaves no half-built stage behind.
`remove_builders` (or CLEAR_BUILDERS) frees that cache.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound

from goldenenv import compat
from goldenenv.images import dockerfile
from goldenenv.images.base import ensure_base
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import Lock
from goldenenv.progress import Steps

STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")
FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)
NEW_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})\s*$")
HOUSEKEEPING = (" ---> ", "Removing intermediate container", "Successfully built", "Successfully tagged")
"""The classic builder's own lines between steps: not a step's output."""
COMMIT_NOTE_S = 2.0
"""A RUN step that stays silent this long after its last line of output is committing its layer: its line says so."""
BUILDERS = "goldenenv-builder"
"""Repository of the kept stages: goldenenv-builder/<lock name>:<stage>."""
CLEAR_BUILDERS = (f"docker image ls --format '{{{{.Repository}}}}:{{{{.Tag}}}}' '{BUILDERS}/*' "
                  "| xargs -r docker image rm")
"""The one command that frees every lock's builder cache (the next build of each image starts cold)."""


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
    stages: dict[str, str] = field(default_factory=dict)
    """Image id of every stage but the last, each kept as goldenenv-builder/<name>:<stage>."""


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
          log: Callable[[str], None] = print, nocache: bool = False, steps: Steps | None = None) -> Built:
    """Bootstrap or pull the base, then build. `log` gets a line as each step (debootstrap, the import, each
    Dockerfile step) ends, with its seconds, and a heartbeat during a long one; `on_step` the step now running."""
    reasons = refusals(lock, options)
    if reasons:
        raise BuildError(f"{lock.name}: refusing to build: " + "; ".join(reasons))
    client = client or docker.from_env()
    steps = steps or Steps(log)
    started = time.monotonic()
    base_ref = ensure_base(client, lock.base, options.apt_mirror, log, steps)
    with tempfile.TemporaryDirectory(prefix=f"goldenenv-{lock.name}-") as tmp:
        context = dockerfile.write_context(lock, base_ref, options, Path(tmp))
        built = build_context(client, context, lock.tag, lock.name, dockerfile.build_args(options), on_step, log,
                              nocache, steps)
    return dataclasses.replace(built, seconds=time.monotonic() - started)


def build_context(client: docker.DockerClient, context: Path, tag: str, name: str,
                  buildargs: dict[str, str] | None = None,
                  on_step: Callable[[int, int, str], None] = lambda n, total, text: None,
                  log: Callable[[str], None] = print, nocache: bool = False, steps: Steps | None = None) -> Built:
    """Build context/Dockerfile as `tag`, keeping its earlier stages as `name`'s builder cache."""
    started = time.monotonic()
    names = stages((context / "Dockerfile").read_text())
    replaced = _image_id(client, tag)
    progress = _Progress()
    try:
        image_id = _stream(client, context, tag, buildargs or {}, on_step, nocache, progress, steps or Steps(log))
    except BuildError:
        _keep_stages(client, name, names, progress.stage_ids, log, complete=False)
        _remove_if_dangling(client, progress.last_id, log)  # the failed stage's steps so far, unless kept
        raise
    kept = _keep_stages(client, name, names, progress.stage_ids, log, complete=True)
    if replaced and replaced != image_id:
        _remove_if_dangling(client, replaced, log)
    return Built(tag, image_id, time.monotonic() - started, progress.cached, progress.steps, kept)


def builder_images(client: docker.DockerClient, name: str | None = None) -> list[str]:
    """Tags of the kept builder stages, of one lock or of all."""
    pattern, prefix = (f"{BUILDERS}/{name}", f"{BUILDERS}/{name}:") if name else (f"{BUILDERS}/*", f"{BUILDERS}/")
    return sorted(t for image in client.images.list(name=pattern) for t in image.tags if t.startswith(prefix))


def remove_builders(client: docker.DockerClient, name: str | None = None) -> list[str]:
    """Free the builder cache of one lock (or all, as CLEAR_BUILDERS does); built images stay."""
    return _untag(client, builder_images(client, name))


def _untag(client, tags: list[str]) -> list[str]:
    """Remove the tags; an image left with none goes too, with its untagged parents that nothing else uses.

    A tag a container still runs from stays (the engine answers 409); the tags removed are returned.
    """
    removed = []
    for tag in tags:
        try:
            client.images.remove(tag)
            removed.append(tag)
        except ImageNotFound:
            pass
        except APIError as e:
            if e.status_code != 409:
                raise
    return removed


@dataclass
class _Progress:
    stage_ids: list[str | None] = field(default_factory=list)
    """Image of each stage begun so far, in Dockerfile order; None until the stage has produced one."""
    last_id: str | None = None
    """Image of the last step that completed."""
    cached: int = 0
    steps: int = 0


def stages(text: str) -> list[str]:
    """The name of each stage of a Dockerfile; an unnamed stage is named by its index, as Docker does."""
    found: list[str] = []
    for line in text.splitlines():
        match = FROM.match(line.strip())
        if match:
            found.append((match.group(2) or str(len(found))).lower())
    return found


def _keep_stages(client, name: str, names: list[str], stage_ids: list[str | None], log,
                 complete: bool) -> dict[str, str]:
    """Tag every finished stage but the last as name's builder cache; drop the images those tags replace.

    After a complete build, tags of stages the Dockerfile no longer has are removed as well.
    """
    repository = f"{BUILDERS}/{name}"
    before = {t.split(":", 1)[1]: _image_id(client, t) for t in builder_images(client, name)}
    kept = {stage: image_id for stage, image_id in zip(names[:-1], stage_ids) if image_id}
    for stage, image_id in kept.items():
        client.api.tag(image_id, repository, stage)
    if complete:
        _untag(client, [f"{repository}:{stage}" for stage in sorted(set(before) - set(kept))])
    for old in {i for s, i in before.items() if i and kept.get(s) != i}:
        _remove_if_dangling(client, old, log)
    return kept


def _image_id(client, ref: str | None) -> str | None:
    try:
        return client.images.get(ref).id if ref else None
    except ImageNotFound:
        return None


def _remove_if_dangling(client, image_id: str | None, log) -> None:
    """Remove an untagged image and its untagged parents; the engine refuses while an image or container uses it."""
    if not image_id:
        return
    try:
        if client.images.get(image_id).tags:
            return
        client.images.remove(image_id)
    except ImageNotFound:
        pass
    except APIError as e:
        if e.status_code != 409:  # 409: another image or a container still uses it, so it is not a leftover
            log(f"could not remove {image_id[:19]}: {e.explanation}")


def step_name(number: int, total: int, stage: str, instruction: str, width: int = 72) -> str:
    """`step 7/31 layer-torch: RUN ...`, a long instruction cut in its middle: its start says what it runs, its
    end which requirements or files."""
    text = " ".join(instruction.split())
    if len(text) > width:
        text = text[:width - 28] + " … " + text[-25:]
    return f"step {number}/{total} {stage}: {text}"


def _end_step(steps: Steps, instruction: str, note: str = "") -> None:
    if steps.current is None:
        return
    quiet = steps.quiet_s()
    if not note and instruction.upper().startswith("RUN") and quiet >= COMMIT_NOTE_S:
        note = f"the last {quiet:.0f} s after its output: exit and layer commit"
    steps.end(note)


def _stream(client, context: Path, tag: str, buildargs: dict[str, str], on_step, nocache: bool,
            progress: _Progress, steps: Steps) -> str:
    step_log: list[str] = []
    current = instruction = stage = ""
    image_id = None

    def chunks():  # the SDK tars and sends the context before its first chunk: that waits in the thread too
        yield from client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True,
                                    buildargs=buildargs, nocache=nocache)

    steps.begin("sending the build context to the engine")
    for chunk in steps.follow(chunks()):
        if "error" in chunk:
            _end_step(steps, instruction, "failed")
            raise BuildError(f"build of {tag} failed at {current or 'start'}: {chunk['error'].strip()}",
                             "".join(step_log))
        if "aux" in chunk and "ID" in chunk["aux"]:  # the engine reports each stage's image when it ends
            image_id = chunk["aux"]["ID"]
            if progress.stage_ids:
                progress.stage_ids[-1] = image_id
        text = chunk.get("stream", "")
        match = STEP.match(text)
        if match:
            _end_step(steps, instruction)
            current, progress.steps, instruction = match.group(0).strip(), int(match.group(2)), match.group(3).strip()
            step_log = [text]
            origin = FROM.match(instruction)
            if origin:
                if progress.stage_ids and progress.stage_ids[-1] is None:
                    progress.stage_ids[-1] = progress.last_id  # the stage's last step made its image
                progress.stage_ids.append(None)
                stage = (origin.group(2) or str(len(progress.stage_ids) - 1)).lower()
            steps.begin(step_name(int(match.group(1)), progress.steps, stage, instruction))
            on_step(int(match.group(1)), progress.steps, instruction)
            continue
        step_log.append(text)
        for line in text.splitlines():
            if not line.startswith(HOUSEKEEPING):
                steps.output(line)
        if "Using cache" in text:
            progress.cached += 1
        new = NEW_IMAGE.match(text)
        if new:
            progress.last_id = new.group(1)
            _end_step(steps, instruction)  # the step's layer is committed
    _end_step(steps, instruction)
    if image_id is None:
        image_id = client.images.get(tag).id
    return image_id

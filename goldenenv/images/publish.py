"""Published golden images: push a built image to a registry and record its digest beside the lock.

Nodes pull `repository@sha256:...` only, never a tag: the digest recorded here is what a stack's
nodes run. `images/<name>/published.yaml` keeps one entry per repository and lock hash, so a
stack finds the digest of the image built from exactly the lock it names.

The tag a push uses is `<lock hash>-<image id>` (build_tag), not the lock hash alone: two builds of one lock (on two
machines, or after a cache prune) are two images with two digests, and a registry with immutable tags (the stacks'
ECR repositories) refuses the second under a tag the first already holds. With the image id in it, each build has
its own tag, and the tag still says which lock it was built from.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from goldenenv.images import lock as lockfile
from goldenenv.images.lock import Lock

PUBLISHED = "published.yaml"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
IMAGE_ID_CHARS = 12
"""Hex digits of the image id in a push's tag, as `docker images` shows it."""
IMMUTABLE_TAG = re.compile(r"tag invalid:.*already exists.*cannot be overwritten because the (repository|tag) "
                           r"is immutable", re.IGNORECASE | re.DOTALL)
"""ECR's answer to a push under a tag that already names an image in an IMMUTABLE repository, as the engine relays
it ("tag invalid: The image tag '<tag>' already exists in the '<repository>' repository and cannot be overwritten
because the repository is immutable."; newer ECR: "... because the tag is immutable.")."""
REGISTRY = re.compile(r"^[a-z0-9][a-z0-9.-]*(:\d{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
"""host[:port][/path]: where `image push --registry` puts `<registry>/<lock name>`."""


class PushError(RuntimeError):
    """The push failed; the message says what the registry or engine answered."""


@dataclass(frozen=True)
class Published:
    repository: str
    digest: str
    lock_hash: str
    pushed_at: str
    compressed_bytes: int | None = None
    tag: str | None = None
    """The tag pushed (build_tag); None in records written before tags carried the image id."""

    @property
    def ref(self) -> str:
        return f"{self.repository}@{self.digest}"


def published_path(lock_name: str, images_dir: Path | None = None) -> Path:
    """In the project's images/ (the first lock folder), also for a lock that comes from the package."""
    return lockfile.folders(images_dir)[0] / lock_name / PUBLISHED


def records(lock_name: str, images_dir: Path | None = None) -> list[Published]:
    path = published_path(lock_name, images_dir)
    if not path.is_file():
        return []
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return [Published(**{k: entry.get(k) for k in Published.__dataclass_fields__})
            for entry in doc.get("published", []) if isinstance(entry, dict)]


def all_records(images_dir: Path | None = None) -> list[Published]:
    """Every push of every lock."""
    return [p for name in lockfile.names(images_dir) for p in records(name, images_dir)]


def latest(lock: Lock, repository: str | None = None, images_dir: Path | None = None) -> Published | None:
    """The newest push of the image built from exactly this lock (to this repository, when named)."""
    found = [p for p in records(lock.name, images_dir)
             if p.lock_hash == lock.content_hash and (repository is None or p.repository == repository)]
    return max(found, key=lambda p: p.pushed_at, default=None)


def record(lock: Lock, entry: Published, images_dir: Path | None = None) -> Path:
    """Add a push to the lock's published file, replacing an older entry for the same repository and lock."""
    kept = [p for p in records(lock.name, images_dir)
            if not (p.repository == entry.repository and p.lock_hash == entry.lock_hash)]
    path = published_path(lock.name, images_dir)
    header = ("# Written by `goldenenv image push`: the digest nodes pull for each repository and lock hash.\n"
              "# Stacks without image.ref read it; commit it with the lock it belongs to.\n")
    body = yaml.safe_dump({"published": [asdict(p) for p in [*kept, entry]]}, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + body, encoding="utf-8")
    return path


def build_tag(lock: Lock, image_id: str) -> str:
    """`<lock hash>-<first 12 hex of the image id>`: one tag per build of the lock, which ECR's immutable tags take."""
    return f"{lock.content_hash}-{image_id.removeprefix('sha256:')[:IMAGE_ID_CHARS]}"


def push(lock: Lock, registry: str, client, auth: dict | None = None, log: Callable[[str], None] = print,
         images_dir: Path | None = None, measure: Callable[[str], int | None] | None = None,
         repository: str | None = None, pulled_from: str | None = None) -> Published:
    """Tag the built image `<registry>/<lock name>:<build tag>` (or `repository`: a stack's own, named as its cloud
    names it), push it, record the digest the registry gave under `pulled_from`, the same repository as the stack's
    nodes name it (a private endpoint), else under the repository pushed to.

    Pushing a build again finds its tag taken in a registry with immutable tags: the image there is this build (its
    id is in the tag), so the digest the registry holds for the tag is recorded."""
    import docker

    if not REGISTRY.match(registry):
        raise PushError(f"--registry {registry!r} is not host[:port][/path] (e.g. localhost:5000 or "
                        "123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv)")
    try:
        image = client.images.get(lock.tag)
    except docker.errors.ImageNotFound:
        raise PushError(f"{lock.tag} is not built here: goldenenv image build {lock.name}") from None
    repository = repository or f"{registry}/{lock.name}"
    tag = build_tag(lock, image.id)
    image.tag(repository, tag=tag)
    log(f"pushing {repository}:{tag}")
    digest = None
    for event in client.images.push(repository, tag=tag, stream=True, decode=True, auth_config=auth):
        if "error" in event and IMMUTABLE_TAG.search(str(event["error"])):
            log(f"{repository}:{tag} is already in the registry (immutable tags): this build was pushed before")
            digest = _pushed_digest(client, repository, tag, auth)
            break
        if "error" in event:
            raise PushError(f"push to {repository} failed: {event['error']}")
        aux = event.get("aux") or {}
        if DIGEST.match(str(aux.get("Digest", ""))):
            digest = aux["Digest"]
    if digest is None:
        raise PushError(f"the registry gave no digest for {repository}:{tag}")
    entry = Published(pulled_from or repository, digest, lock.content_hash,
                      datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                      measure(lock.tag) if measure else None, tag)
    record(lock, entry, images_dir)
    return entry


def _pushed_digest(client, repository: str, tag: str, auth: dict | None) -> str:
    """The digest the registry holds for a tag this build already took (the engine's distribution inspect)."""
    import docker

    try:
        digest = str(client.images.get_registry_data(f"{repository}:{tag}", auth_config=auth).id)
    except docker.errors.APIError as e:
        digest = f"unreadable ({e.explanation or e})"
    if not DIGEST.match(digest):
        raise PushError(
            f"{repository}:{tag} already exists and the repository's tags are immutable, but its digest is "
            f"{digest}: read it with `aws ecr describe-images --repository-name {repository.split('/', 1)[-1]} "
            f"--image-ids imageTag={tag}` and set the stack's image.ref to {repository}@<that digest>, or delete "
            "that image from the repository and push again")
    return digest

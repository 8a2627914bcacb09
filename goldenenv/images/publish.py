"""Published golden images: push a built image to a registry and record its digest beside the lock.

Nodes pull `repository@sha256:...` only, never a tag: the digest recorded here is what a stack's
nodes run. `images/<name>/published.yaml` keeps one entry per repository and lock hash, so a
stack finds the digest of the image built from exactly the lock it names.
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


def push(lock: Lock, registry: str, client, auth: dict | None = None, log: Callable[[str], None] = print,
         images_dir: Path | None = None, measure: Callable[[str], int | None] | None = None) -> Published:
    """Tag the built image `<registry>/<lock name>:<lock hash>`, push it, record the digest the registry gave."""
    import docker

    if not REGISTRY.match(registry):
        raise PushError(f"--registry {registry!r} is not host[:port][/path] (e.g. localhost:5000 or "
                        "123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv)")
    try:
        image = client.images.get(lock.tag)
    except docker.errors.ImageNotFound:
        raise PushError(f"{lock.tag} is not built here: goldenenv image build {lock.name}") from None
    repository = f"{registry}/{lock.name}"
    image.tag(repository, tag=lock.content_hash)
    log(f"pushing {repository}:{lock.content_hash}")
    digest = None
    for event in client.images.push(repository, tag=lock.content_hash, stream=True, decode=True, auth_config=auth):
        if "error" in event:
            raise PushError(f"push to {repository} failed: {event['error']}")
        aux = event.get("aux") or {}
        if DIGEST.match(str(aux.get("Digest", ""))):
            digest = aux["Digest"]
    if digest is None:
        raise PushError(f"the registry gave no digest for {repository}:{lock.content_hash}")
    entry = Published(repository, digest, lock.content_hash,
                      datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                      measure(lock.tag) if measure else None)
    record(lock, entry, images_dir)
    return entry

"""What every cloud's retained stores share: finding one again by name, refusing another stack's, and the golden
image ref nodes pull from the stack's repository."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from goldenenv.images import lock as image_lock
from goldenenv.images import publish
from goldenenv.spec import STACK_TAG_KEY, ClusterSpec, ConfigError, Problem

PROJECT_TAG_KEY = "project"


@dataclass(frozen=True)
class Found:
    """A store that exists under the name the stack derives, with the tags it carries."""

    name: str
    tags: Mapping[str, str] = field(default_factory=dict)


def adoptable(found: Found | None, project: str, stack: str, key: str, kind: str) -> str | None:
    """The id to import when `found` is this stack's retained store; None when there is nothing to adopt.

    A store tagged for another project or stack is refused (ConfigError at `key`): adopting it would hand one
    stack's checkpoints to another. An untagged store of that exact name is adopted (its tags are then set).
    """
    if found is None:
        return None
    owner = (found.tags.get(PROJECT_TAG_KEY), found.tags.get(STACK_TAG_KEY))
    if any(owner) and owner != (project, stack):
        raise ConfigError([Problem(key, f"{kind} {found.name} already exists and belongs to project {owner[0]!r} "
                                   f"stack {owner[1]!r}, not {project!r} {stack!r}; give this stack another name "
                                   f"with {key}")])
    return found.name


def golden_image_ref(spec: ClusterSpec, repository_url: pulumi.Output[str]) -> pulumi.Output[str | None]:
    """What nodes pull, always by digest: the stack's image.ref, else the digest `image push` recorded for the
    stack's repository and this exact lock; None until the image is pushed (plan warns, up refuses)."""
    if spec.image.ref:
        return pulumi.Output.from_input(spec.image.ref)
    lock = image_lock.load(spec.image.lock)

    def pushed(url: str) -> str | None:
        entry = publish.latest(lock, url)
        return entry.ref if entry else None

    return repository_url.apply(pushed)

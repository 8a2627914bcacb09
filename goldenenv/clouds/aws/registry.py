"""The stack's ECR repository: where its golden image is pushed and from where nodes pull it by digest.

Retained on destroy and adopted by the next `up` (its name is fixed by stack and lock), so the digest that
`image push` recorded stays pullable: a stack stood up again next week needs no new push.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

KEEP_IMAGES = 10
"""Images kept in the repository; older ones expire (a stack pins one digest at a time)."""
TAG_MUTABILITY = "IMMUTABLE"
SCAN_ON_PUSH = True
ENCRYPTION = "KMS"
"""The repository's settings: what the first `up` creates, what a retained repository is aligned to before it is
adopted (retained.align_repository_settings), and, for the encryption ECR cannot change, what it must already have
(retained.LiveLookup.repository)."""


def repository_name(project: str, stack: str, lock: str) -> str:
    """`goldenenv/<project>/<stack>/<lock>` in ECR's alphabet (lowercase; components of [a-z0-9] joined by . _ -):
    two projects' stacks named `dev` keep their images apart."""
    parts = ["goldenenv", project, stack, lock]
    return "/".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") or "x" for p in parts)


def registry_of(repository_url: str) -> str:
    """`<account>.dkr.ecr.<region>.amazonaws.com/goldenenv/<stack>` from the repository URL: what `image push` takes."""
    return repository_url.rsplit("/", 1)[0]


@dataclass(frozen=True, kw_only=True)
class ImageRepositoryArgs:
    name: str
    adopt: str | None = None
    """The retained repository to adopt (Pulumi import) when it already exists."""
    tags: dict[str, str]


class ImageRepository(pulumi.ComponentResource):
    """Immutable tags, scan on push, KMS encryption, and a lifecycle that keeps the last KEEP_IMAGES."""

    url: pulumi.Output[str]

    def __init__(self, name: str, args: ImageRepositoryArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:aws:ImageRepository", name, None, opts)
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        # No force_delete: Pulumi never deletes the repository (retained), `destroy --purge-data` deletes it by
        # name, and ECR does not store the flag, so an import could not read it back and would differ from it.
        repository = aws.ecr.Repository(
            f"{name}-repo", name=args.name, image_tag_mutability=TAG_MUTABILITY,
            image_scanning_configuration={"scan_on_push": SCAN_ON_PUSH},
            encryption_configurations=[{"encryption_type": ENCRYPTION}],
            tags=args.tags,
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(import_=args.adopt)),
        )
        aws.ecr.LifecyclePolicy(
            f"{name}-keep-last", repository=repository.name,
            policy=json.dumps({"rules": [{
                "rulePriority": 1, "description": f"keep the last {KEEP_IMAGES} images",
                "selection": {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": KEEP_IMAGES},
                "action": {"type": "expire"},
            }]}),
            opts=keep,
        )
        self.url = repository.repository_url
        self.register_outputs({"url": self.url})

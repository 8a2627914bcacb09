"""Names of the stack's Azure resources: ARM's limits on a name, names Azure wants unique across Azure, and the
GUIDs ARM would assign under the offline plan.

Below the Cloud class and cluster (clouds/azure/__init__.py) and the parts that name their resources (budget.py,
storage.py), which import these from here, not from the package that imports them.
"""

from __future__ import annotations

import hashlib
import re
import uuid

from goldenenv.clouds.base import stable_number

NAME_MAX = 64


def resource_name(*parts: str, limit: int = NAME_MAX) -> str:
    """Parts joined by `-`, other characters made `-`, shortened with a digest past `limit`."""
    text = re.sub(r"[^A-Za-z0-9-]+", "-", "-".join(p for p in parts if p)).strip("-").lower()
    if len(text) <= limit:
        return text
    return f"{text[:limit - 9].rstrip('-')}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def mock_guid(resource_id: str, what: str) -> str:
    """A GUID ARM would assign (an identity's principal or client id) under the offline plan: stable per
    resource."""
    return str(uuid.UUID(int=stable_number(f"{resource_id}/{what}") << 68))


def global_name(kind: str, project: str, stack: str, subscription: str, limit: int, hyphens: bool) -> str:
    """A name Azure wants unique across all of Azure (vaults, registries): a slug of the stack and a digest of the
    subscription, project and stack, so two stacks (or two subscriptions) never ask for the same one."""
    digest = hashlib.sha256(f"{subscription}/{project}/{stack}/{kind}".encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9]+", "-" if hyphens else "", stack.lower()).strip("-")
    room = limit - len(kind) - len(digest) - (2 if hyphens else 0)
    return f"{kind}-{slug[:room].strip('-')}-{digest}" if hyphens else f"{kind}{slug[:room]}{digest}"

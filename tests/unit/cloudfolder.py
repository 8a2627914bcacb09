"""What the contract tests read of a cloud's folder (goldenenv/clouds/<cloud>/) instead of writing it per cloud: a
module of the folder by its name, and the provider the cloud builds on. Two clouds may build on one provider (a new
cloud started from a copy of another's folder): a test that fakes a provider's shapes (its grants, its API) finds
its fake by the provider and drives the cloud's own modules with it."""

from __future__ import annotations

import importlib
from types import ModuleType


def module(cloud: str, name: str) -> ModuleType:
    """goldenenv/clouds/<cloud>/<name>.py: the folder's module of that job (privilege, tags, guard ...)."""
    return importlib.import_module(f"goldenenv.clouds.{cloud}.{name}")


def provider(cloud: str) -> str:
    """The Pulumi provider the cloud's resources are of, as its guardrail facts name it (aws, alicloud, gcp,
    azure-native)."""
    return module(cloud, "guardrail_facts").FACTS.name

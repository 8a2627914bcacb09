"""The Cloud protocol and its registry.

A cloud is stateless: it says what it can do (capabilities), checks a spec against that,
and builds the spec's resources as Pulumi components. "Not on this cloud" is then one
clear error, never a missing branch deep in a component.
"""

from __future__ import annotations

import difflib
from enum import Enum
from typing import Any, Callable, Protocol

from goldenenv.spec import ClusterSpec, ConfigError, Problem, pool_key


class Capability(str, Enum):
    RDMA = "rdma"
    SPOT = "spot"
    CAPACITY_RESERVATION = "capacity-reservation"
    PARALLEL_FS = "parallel-fs"
    LOCAL_NVME = "local-nvme"
    BUDGET = "budget"
    HARD_STOP = "hard-stop"


class Cloud(Protocol):
    name: str
    capabilities: frozenset[Capability]

    def check(self, spec: ClusterSpec) -> list[Problem]:
        """Cloud-specific rules beyond capabilities (currency, region names, ...)."""

    def build(self, spec: ClusterSpec) -> dict[str, Any]:
        """Declare the cluster's resources; return the stack outputs (values or Outputs)."""


_REGISTRY: dict[str, Callable[[], Cloud]] = {}


def register(name: str, factory: Callable[[], Cloud]) -> None:
    _REGISTRY[name] = factory


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> Cloud:
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, names(), n=1)
        hint = f" — did you mean {close[0]}?" if close else f"; available: {', '.join(names())}"
        raise ConfigError([Problem("goldenenv:cloud", f"'{name}' is not a cloud goldenenv supports{hint}")])
    return _REGISTRY[name]()


def required_capabilities(spec: ClusterSpec) -> dict[Capability, str]:
    """What the spec asks of its cloud, each with the key that asks it."""
    needs: dict[Capability, str] = {}
    for i, pool in enumerate(spec.nodes):
        at = pool_key(i, len(spec.nodes))
        if pool.efa:
            needs[Capability.RDMA] = f"{at}.efa"
        if pool.capacity.value == "spot":
            needs[Capability.SPOT] = f"{at}.capacity"
        if pool.capacity.value == "capacity-reservation":
            needs[Capability.CAPACITY_RESERVATION] = f"{at}.capacity"
    if spec.storage.parallel_fs.enabled and "parallelFs" in spec.storage.model_fields_set:
        needs[Capability.PARALLEL_FS] = "goldenenv:storage.parallelFs"
    if spec.budget is not None:
        needs[Capability.BUDGET] = "goldenenv:budget"
        if spec.budget.hard_stop:
            needs[Capability.HARD_STOP] = "goldenenv:budget.hardStop"
    return needs


def validate(spec: ClusterSpec) -> Cloud:
    """The spec's cloud, once the spec asks nothing of it that it cannot do."""
    cloud = get(spec.cloud)
    problems = [
        Problem(key, f"{cloud.name} cannot provide {cap.value}; clouds that can: "
                + (", ".join(n for n in names() if cap in get(n).capabilities) or "none yet"))
        for cap, key in required_capabilities(spec).items()
        if cap not in cloud.capabilities
    ]
    problems += cloud.check(spec)
    if problems:
        raise ConfigError(problems)
    return cloud

"""The fault table's cloud-neutral fleet and faults, and the protocol each cloud's adapter follows.

An adapter (tests/unit/stopfakes/<cloud>.py, registered in test_contract_stop_faults.ADAPTERS) runs its cloud's
own stop function against a fake of that cloud's API in its documented shapes, with the faults injected the way
the cloud shows them (its throttling answer, its paging, its refusal to stop a node still starting).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

STACK, PROJECT = "dev", "llm-pretrain"
"""The stack whose stop function runs. Decoys carry names a careless match would take for it."""


@dataclass(frozen=True)
class FleetNode:
    name: str
    """Unique in the fleet; each adapter derives its cloud's names and ids from it."""
    stack: str | None = STACK
    """None: the node carries no stack tag or label at all."""
    project: str = PROJECT
    starting_polls: int = 0
    """More than 0: the node is still starting (pending, provisioning, creating) and runs once the cloud has shown it
    that many times more (a listing or a look at it); until then the cloud refuses to stop it as the cloud does."""

    @property
    def ours(self) -> bool:
        return self.stack == STACK and self.project == PROJECT


@dataclass(frozen=True)
class Faults:
    throttle: str = "none"
    """none | every-second (every second API call is throttled) | random-half (each call throttled with
    probability 1/2, seeded)."""
    seed: int = 0
    page_size: int | None = None
    """Items per listing page; None: the cloud's own default."""
    refuse: frozenset[str] = frozenset()
    """Fleet names whose stop the cloud always refuses with an error that is not transient."""
    lost_page: int = 0
    """More than 0: during the first invocation, this page (1-based) of the node listing never comes (the cloud
    answers a server error every time it is asked); the listing is whole again from the second invocation."""


@dataclass
class Throttle:
    """Decides, call by call, whether the fake answers with the cloud's throttling error."""

    faults: Faults
    calls: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.faults.seed)

    def now(self) -> bool:
        self.calls += 1
        if self.faults.throttle == "every-second":
            return self.calls % 2 == 0
        if self.faults.throttle == "random-half":
            return self.rng.random() < 0.5
        return False


@dataclass(frozen=True)
class Invocation:
    failed: bool
    """The invocation failed (raised, or answered an error status): the cloud delivers it again or alerts."""
    message: str = ""
    """The failure's text: what names the nodes left."""


class Adapter(Protocol):
    """One cloud's stop function on its fake. Paths: "hard-stop" (the budget's spend is over the limit) and "ttl"
    (every node's time to live has passed)."""

    cloud: ClassVar[str]
    not_served: ClassVar[dict[str, str]]
    """Paths this cloud serves without a stop call of goldenenv's, each with why (e.g. Alibaba's TTL is the
    cloud's own auto-release)."""

    def __init__(self, fleet: list[FleetNode], faults: Faults) -> None: ...

    def invoke(self, path: str) -> Invocation:
        """One invocation of the stop function on ``path``, on simulated time (it never really sleeps)."""

    def running(self) -> set[str]:
        """Fleet names of the nodes still billing as running (running or starting)."""

    def touched(self) -> set[str]:
        """Fleet names of the nodes any stop call named."""

    def restart(self, name: str) -> None:
        """Start a stopped node again by hand (a fresh start time)."""

    def named(self, name: str) -> str:
        """How the stop function's failure names this node."""

    def close(self) -> None: ...

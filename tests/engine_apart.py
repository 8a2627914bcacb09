"""How `pytest -n N` (pytest-xdist, as ./scripts/test.sh runs the suite) shares the tests out among its workers.

Every test outside tests/unit uses the one Docker engine: image builds, local clusters, emulated hosts booted from
session fixtures (a registry, the cloud's APIs, each stack's head and node). Those tests are one work unit, run by
one worker in the order they were collected, as a run without -n runs them: two workers would each build and boot
their own copies on the same engine. That unit goes out first, as it is the longest, and the other workers run
the unit tests (pure logic under Pulumi's mocks, CPU-bound) beside it meanwhile, one test module at a time, so a
module-scoped plan of a shipped stack is still made once per module."""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

ENGINE = "tests that use the Docker engine"
"""The one work unit of every test outside UNIT."""
UNIT = "tests/unit/"
"""The folder of the tests that need no engine (node ids are relative to the repository's root)."""


class EngineApart(LoadScopeScheduling):
    """xdist's scope scheduling with two kinds of scope: ENGINE for every test outside UNIT, and the test module
    for each test in UNIT. ENGINE is handed out before any other scope."""

    def _split_scope(self, nodeid: str) -> str:
        return nodeid.split("::", 1)[0] if nodeid.startswith(UNIT) else ENGINE

    def _assign_work_unit(self, node) -> None:
        if ENGINE in self.workqueue:
            self.workqueue.move_to_end(ENGINE, last=False)
        super()._assign_work_unit(node)

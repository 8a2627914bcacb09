"""Which fake of its cloud's API runs a cloud's stop function: tests/unit/stopfakes/<cloud>.py, found by the cloud's
name (its ADAPTER, a stopfakes.world.Adapter).

A cloud with no fake of its own that builds on the provider another cloud's fake speaks (a cloud started from a copy
of that cloud's folder) is held by that fake where the fake can run the cloud's own stop module (its ADAPTER has
`of`): the calls, answers and faults are the provider's, the code under test is the cloud's. Otherwise there is none,
and the rules fail naming the file to add: a stop function is never held to a fake of an API it does not call."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import cloudfolder

HERE = Path(__file__).parent
NOT_FAKES = {"__init__", "world", "found"}


def adapter(cloud: str) -> type | None:
    """The adapter class that runs the cloud's stop function on a fake of its API, or None."""
    if (HERE / f"{cloud}.py").is_file():
        return importlib.import_module(f"{__package__}.{cloud}").ADAPTER
    provider = cloudfolder.provider(cloud)
    for found in pkgutil.iter_modules([str(HERE)]):
        if found.name in NOT_FAKES:
            continue
        own = getattr(importlib.import_module(f"{__package__}.{found.name}"), "ADAPTER", None)
        if own is not None and own.provider == provider and hasattr(own, "of"):
            return own.of(cloud)
    return None

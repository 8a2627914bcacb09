"""Fakes the stop functions' tests share: simulated time for the stop core (no test really sleeps)."""

from __future__ import annotations

import random

from goldenenv.clouds import stopcore


class SimulatedTime:
    """A monotonic clock that only moves when something sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def simulated_clock(seconds: float = 270.0, seed: int = 0, time: SimulatedTime | None = None) -> stopcore.Clock:
    """An invocation of ``seconds`` on simulated time, its jitter seeded."""
    time = time or SimulatedTime()
    return stopcore.Clock(seconds, monotonic=time.monotonic, sleep=time.sleep, rng=random.Random(seed))

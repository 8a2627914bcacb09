"""How every cloud's stop function fares under throttling: one run of each, on the fault table's fakes.

Each cloud's own stop function (AWS's reaper, Alibaba's guard, Google Cloud's, Azure's and Tencent's stop functions,
all on goldenenv/clouds/stopcore.py; every cloud of the registry with the hard stop, found as the contract tests find
it: stopfakes.found) runs the budget's hard stop against tests/unit/stopfakes/<cloud>.py, a fake of that
cloud's API in its own shapes, with a fleet of the stack's nodes (some still starting) beside decoy stacks. Time
is simulated (the functions' backoffs and waits move a clock, nothing sleeps), so the figures are the functions'
own: how many invocations stop every node, how many API calls that takes, and what share of an invocation's time
the backoffs and waits use. Printed per cloud, calm and with every second call or a random half of the calls
throttled; the ratios compare each throttled run with the calm one of the same cloud.

    .venv/bin/python scripts/bench_stop.py [--nodes 600] [--starting 20] [--page-size 100]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))

import stopfakes  # noqa: E402
from stopfakes import found, world  # noqa: E402
from stopfakes.world import Faults, FleetNode  # noqa: E402

from goldenenv import clouds  # noqa: E402
from goldenenv.clouds.base import Capability  # noqa: E402

ADAPTERS = {cloud: found.adapter(cloud) for cloud in clouds.names()
            if Capability.HARD_STOP in clouds.get(cloud).capabilities}
FAULTS = {"calm": Faults(), "every second call throttled": Faults(throttle="every-second"),
          "half throttled at random": Faults(throttle="random-half", seed=50)}
DECOYS = [FleetNode("dev2-node-0", stack="dev2"), FleetNode("other-project-dev-0", project="other-team"),
          FleetNode("untagged-0", stack=None)]
MOST_INVOCATIONS = 5


@dataclass
class Counted:
    calls: int = 0
    throttled: int = 0


COUNT = Counted()
CLOCKS: list[tuple[stopfakes.SimulatedTime, float]] = []


def counting_now(original):
    def now(self) -> bool:
        throttled = original(self)
        COUNT.calls += 1
        COUNT.throttled += throttled
        return throttled
    return now


def recording_clock(seconds: float = 270.0, seed: int = 0, time: stopfakes.SimulatedTime | None = None):
    simulated = time or stopfakes.SimulatedTime()
    CLOCKS.append((simulated, seconds))
    return stopfakes.simulated_clock(seconds, seed=seed, time=simulated)


@dataclass(frozen=True)
class Outcome:
    invocations: int
    stopped_all: bool
    calls: int
    throttled: int
    first_share: float
    """Simulated seconds the first invocation spent waiting, as a share of its time."""
    decoys_touched: int
    wall_s: float


def run(cloud: str, faults: Faults, nodes: int, starting: int, page_size: int) -> Outcome:
    fleet = [FleetNode(f"dev-node-{k}", starting_polls=3 if k >= nodes - starting else 0) for k in range(nodes)]
    fleet += DECOYS
    COUNT.calls = COUNT.throttled = 0
    CLOCKS.clear()
    adapter = ADAPTERS[cloud](fleet, Faults(throttle=faults.throttle, seed=faults.seed, page_size=page_size))
    mine = {n.name for n in fleet if n.ours}
    started = time.perf_counter()
    invocations = 0
    try:
        while invocations < MOST_INVOCATIONS and adapter.running() & mine:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                adapter.invoke("hard-stop")
            invocations += 1
        decoys = len(adapter.touched() & {n.name for n in DECOYS})
        stopped_all = not adapter.running() & mine
    finally:
        adapter.close()
    wall = time.perf_counter() - started
    first, budget = CLOCKS[0] if CLOCKS else (stopfakes.SimulatedTime(), 1.0)
    return Outcome(invocations, stopped_all, COUNT.calls, COUNT.throttled, first.now / budget, decoys, wall)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=600)
    parser.add_argument("--starting", type=int, default=20, help="of them still starting when the stop comes")
    parser.add_argument("--page-size", type=int, default=100)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # the functions' own log lines, one per node
    world.Throttle.now = counting_now(world.Throttle.now)
    for adapter in ADAPTERS.values():
        sys.modules[adapter.__module__].simulated_clock = recording_clock
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; simulated time, fakes in each cloud's API shapes")
    print(f"fleet: {args.nodes} nodes of the stack ({args.starting} still starting), {len(DECOYS)} decoys, "
          f"listing pages of {args.page_size}; the budget's hard stop")
    print(f"{'cloud':9} {'faults':28} {'invocations':>11} {'all stopped':>11} {'API calls':>9} {'throttled':>9} "
          f"{'calls/node':>10} {'wait share':>10} {'decoys hit':>10} {'wall s':>7}")
    failed = False
    for cloud in ADAPTERS:
        calm = None
        for name, faults in FAULTS.items():
            outcome = run(cloud, faults, args.nodes, args.starting, args.page_size)
            calm = calm or outcome
            failed |= not outcome.stopped_all or outcome.decoys_touched > 0
            print(f"{cloud:9} {name:28} {outcome.invocations:>11} {str(outcome.stopped_all):>11} "
                  f"{outcome.calls:>9} {outcome.throttled:>9} {outcome.calls / args.nodes:>10.2f} "
                  f"{outcome.first_share:>10.2f} {outcome.decoys_touched:>10} {outcome.wall_s:>7.2f}"
                  + (f"   calls x{outcome.calls / calm.calls:.2f} of calm" if outcome is not calm else ""))
    print("wait share: simulated seconds the first invocation spent in backoffs and waits for starting nodes, over "
          "the seconds it may run")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

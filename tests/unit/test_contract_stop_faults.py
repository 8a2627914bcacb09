"""RULE: under throttling, paging, nodes still starting and hands that restart nodes, every cloud's stop function
stops every node of its stack within one invocation or the next, touches nothing else, and fails while any is left.

One table of faults drives the four stop functions (goldenenv/clouds/stopcore.py is their shared core), each on a
fake of its cloud's API in the cloud's own shapes (tests/unit/stopfakes/<cloud>.py): every second API call
throttled, half of them throttled at random (seeded), listings of several pages, nodes that are still starting
and run only after a few looks, a node started again by hand after the stop, and decoys a careless match would take
for the stack (stack ``dev2`` beside ``dev``, stack ``dev`` of another project, a node with no tags at all).

Each cloud's adapter (stopfakes.world.Adapter) is found by its name (stopfakes.found): tests/unit/stopfakes/<cloud>.py,
or, for a cloud built from a copy of another cloud's folder on the same provider, that cloud's fake running the new
cloud's own stop module. A cloud that declares Capability.HARD_STOP and has neither fails every test here, naming the
file to add, so a fifth cloud is held to the table the day it is added.
"""

from __future__ import annotations

import pytest

from goldenenv.clouds import base
from goldenenv.clouds.base import Capability

from stopfakes import found
from stopfakes.world import PROJECT, STACK, Faults, FleetNode

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HARD_STOP_CLOUDS = sorted(n for n in base.names() if Capability.HARD_STOP in base.get(n).capabilities)

FAULTS = {
    "calm": Faults(),
    "every-second-call-throttled": Faults(throttle="every-second"),
    "half-throttled-at-random": Faults(throttle="random-half", seed=50),
}
PATHS = ("hard-stop", "ttl")

DECOYS = [
    FleetNode("dev2-node-0", stack="dev2"),
    FleetNode("dev2-node-1", stack="dev2"),
    FleetNode("other-project-dev-0", project="other-team"),
    FleetNode("untagged-0", stack=None),
]
"""Nodes no stop function of stack dev in project llm-pretrain may touch."""


def adapter_for(cloud: str, fleet: list[FleetNode], faults: Faults, path: str | None = None):
    adapter = found.adapter(cloud)
    if adapter is None:
        pytest.fail(f"add tests/unit/stopfakes/{cloud}.py: {cloud} declares the hard stop, and its ADAPTER "
                    "(stopfakes.world.Adapter) runs its stop function on a fake of its cloud's API under the fault "
                    "table", pytrace=False)
    if path in adapter.not_served:
        pytest.skip(f"{cloud} {path}: {adapter.not_served[path]}")
    return adapter(fleet, faults)


def ours(count: int, starting: int = 0, polls: int = 3) -> list[FleetNode]:
    """``count`` nodes of the stack; the last ``starting`` of them still starting, running after ``polls`` looks."""
    return [FleetNode(f"dev-node-{k}", starting_polls=polls if k >= count - starting else 0) for k in range(count)]


def stop_within_two(world, path: str, fleet: list[FleetNode]) -> None:
    """Run the path once, and once more if the first run failed; assert the rule."""
    mine = {n.name for n in fleet if n.ours}
    first = world.invoke(path)
    left = world.running() & mine
    if left:
        assert first.failed, f"the invocation succeeded with nodes of the stack still running: {sorted(left)}"
        unnamed = [n for n in left if world.named(n) not in first.message]
        assert not unnamed, f"the failed invocation does not name {unnamed}: {first.message}"
        second = world.invoke(path)
        left = world.running() & mine
        assert not left, f"still running after two invocations: {sorted(left)} ({second.message})"
        assert not second.failed, second.message
    decoys = {n.name for n in fleet if not n.ours}
    assert not world.touched() & decoys, f"a stop named another stack's node: {sorted(world.touched() & decoys)}"
    assert decoys <= world.running()


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cloud", HARD_STOP_CLOUDS)
def test_every_node_of_the_stack_is_stopped_and_nothing_else(cloud, path, fault):
    fleet = ours(12, starting=3 if path == "hard-stop" else 0) + DECOYS
    world = adapter_for(cloud, fleet, FAULTS[fault], path)
    try:
        stop_within_two(world, path, fleet)
    finally:
        world.close()


@pytest.mark.parametrize("throttle", ["every-second", "random-half"])
@pytest.mark.parametrize("cloud", HARD_STOP_CLOUDS)
def test_six_hundred_nodes_in_pages_of_a_hundred_under_throttling(cloud, throttle):
    """Compute Engine stops one VM a call: 600 of them with half the calls throttled take all of a 540 s
    invocation and part of the next (scripts/bench_stop.py prints it)."""
    fleet = ours(600, starting=20) + DECOYS
    world = adapter_for(cloud, fleet, Faults(throttle=throttle, seed=50, page_size=100), "hard-stop")
    try:
        stop_within_two(world, "hard-stop", fleet)
    finally:
        world.close()


@pytest.mark.parametrize("cloud", HARD_STOP_CLOUDS)
def test_a_listing_page_that_never_comes_fails_the_invocation_and_is_never_read_as_no_nodes(cloud):
    fleet = ours(250) + DECOYS
    world = adapter_for(cloud, fleet, Faults(page_size=100, lost_page=2), "hard-stop")
    try:
        first = world.invoke("hard-stop")
        assert first.failed and "list" in first.message, first.message
        stop_within_two(world, "hard-stop", fleet)
    finally:
        world.close()


@pytest.mark.parametrize("cloud", HARD_STOP_CLOUDS)
def test_a_node_started_again_by_hand_is_stopped_by_the_next_run(cloud):
    fleet = ours(4) + DECOYS
    world = adapter_for(cloud, fleet, Faults(throttle="every-second"), "hard-stop")
    try:
        assert not world.invoke("hard-stop").failed
        world.restart("dev-node-2")
        assert world.running() & {"dev-node-2"}
        stop_within_two(world, "hard-stop", fleet)
    finally:
        world.close()


@pytest.mark.parametrize("cloud", HARD_STOP_CLOUDS)
def test_a_node_that_cannot_be_stopped_fails_the_invocation_by_name_and_holds_back_no_other(cloud):
    fleet = ours(6) + DECOYS
    world = adapter_for(cloud, fleet, Faults(throttle="every-second", refuse=frozenset({"dev-node-1"})),
                        "hard-stop")
    try:
        outcome = world.invoke("hard-stop")
        assert outcome.failed and world.named("dev-node-1") in outcome.message, outcome.message
        assert world.running() & {n.name for n in fleet if n.ours} == {"dev-node-1"}
    finally:
        world.close()


@pytest.mark.parametrize("cloud", HARD_STOP_CLOUDS)
def test_a_node_still_starting_when_the_time_runs_out_is_named_and_stopped_by_the_next_run(cloud):
    fleet = ours(3, starting=1, polls=10_000) + DECOYS
    world = adapter_for(cloud, fleet, Faults(), "hard-stop")
    try:
        outcome = world.invoke("hard-stop")
        assert outcome.failed and world.named("dev-node-2") in outcome.message, outcome.message
        assert world.running() & {n.name for n in fleet if n.ours} == {"dev-node-2"}
    finally:
        world.close()


def test_the_decoys_are_what_their_names_say():
    """The table's own anchor: the decoys differ from the stack only by the stack, the project or the tags."""
    assert {(n.stack, n.project) for n in DECOYS} == {("dev2", PROJECT), (STACK, "other-team"), (None, PROJECT)}
    assert not any(n.ours for n in DECOYS)

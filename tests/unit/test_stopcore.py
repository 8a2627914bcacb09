"""The stop core's rules on their own (goldenenv/clouds/stopcore.py), on simulated time: the fault table
(test_contract_stop_faults.py) drives them through each cloud's function; these pin each rule's edges."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from goldenenv.clouds import stopcore

from stopfakes import SimulatedTime, simulated_clock


class Throttled(Exception):
    pass


def flaky(failures: int, answer="done"):
    """A call that raises Throttled ``failures`` times, then answers."""
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= failures:
            raise Throttled(f"throttled #{len(calls)}")
        return answer

    return call, calls


def is_throttled(error: BaseException) -> bool:
    return isinstance(error, Throttled)


# ---------------------------------------------------------------- retry and time

def test_retry_waits_with_jitter_under_an_exponential_cap_until_the_call_answers():
    time = SimulatedTime()
    call, calls = flaky(5)
    assert stopcore.retry(call, is_throttled, simulated_clock(300, time=time)) == "done"
    assert len(calls) == 6 and len(time.slept) == 5
    caps = [min(stopcore.RETRY_CAP_SECONDS, stopcore.RETRY_BASE_SECONDS * 2 ** n) for n in range(5)]
    assert all(0 <= wait <= cap for wait, cap in zip(time.slept, caps))
    assert len(set(time.slept)) == 5, "full jitter: the waits are random, not the cap"


def test_retry_gives_up_with_the_last_error_when_the_invocations_time_is_spent():
    time = SimulatedTime()
    call, calls = flaky(10_000)
    with pytest.raises(Throttled):
        stopcore.retry(call, is_throttled, simulated_clock(120, time=time))
    assert time.now <= 120 and len(calls) > 5


def test_an_error_that_is_not_transient_is_raised_at_once():
    time = SimulatedTime()

    def refused():
        raise ValueError("403 Forbidden")

    with pytest.raises(ValueError, match="403"):
        stopcore.retry(refused, is_throttled, simulated_clock(300, time=time))
    assert time.slept == []


def test_the_clock_never_sleeps_past_its_deadline():
    time = SimulatedTime()
    clock = simulated_clock(60, time=time)
    clock.sleep(50)
    with pytest.raises(stopcore.OutOfTime):
        clock.sleep(11)
    assert time.now == 50 and clock.left() == 10
    assert stopcore.Clock(300, margin_seconds=30, monotonic=time.monotonic, sleep=time.sleep).left() == 270


# ---------------------------------------------------------------- pages

def test_every_page_is_read_each_retried():
    pages = {None: ([1, 2], "p2"), "p2": ([3], "p3"), "p3": ([4, 5], None)}
    throttled = {"p2": 2}

    def fetch(token):
        if throttled.get(token):
            throttled[token] -= 1
            raise Throttled(token)
        return pages[token]

    assert stopcore.all_pages(fetch, simulated_clock(), is_throttled) == [1, 2, 3, 4, 5]


def test_a_page_that_never_comes_is_an_incomplete_listing_never_no_nodes():
    def fetch(token):
        if token == "p2":
            raise Throttled("page 2")
        return ([1], "p2")

    with pytest.raises(stopcore.ListingIncomplete, match="page 2 could not be read.*1 item"):
        stopcore.all_pages(fetch, simulated_clock(60), is_throttled, "the nodes")


def test_a_listing_that_loops_on_a_token_is_incomplete():
    with pytest.raises(stopcore.ListingIncomplete, match="loops"):
        stopcore.all_pages(lambda token: ([1], "same"), simulated_clock(), is_throttled)


# ---------------------------------------------------------------- stopping

class Cloud:
    """Nodes by name -> state; stop() refuses a batch holding a starting node, as Azure and EC2 refuse one call."""

    def __init__(self, states: dict[str, str], runs_after: int = 2, refuse: frozenset[str] = frozenset()):
        self.states, self.runs_after, self.refuse = dict(states), runs_after, refuse
        self.calls: list[list[str]] = []
        self.looks = 0

    def stop(self, batch: list[str]) -> None:
        self.calls.append(list(batch))
        bad = [n for n in batch if n in self.refuse or self.states[n] == stopcore.STARTING]
        if bad:
            raise RuntimeError(f"refused {bad}")
        for name in batch:
            self.states[name] = stopcore.STOPPING

    def refresh(self, waiting: list[str]) -> list[str]:
        self.looks += 1
        if self.looks >= self.runs_after:
            for name in waiting:
                if self.states[name] == stopcore.STARTING:
                    self.states[name] = stopcore.LIVE
        return [n for n in waiting if n in self.states]

    def plan(self, batch_size: int = 10) -> stopcore.StopPlan[str]:
        return stopcore.StopPlan(name=str, state=lambda n: self.states[n], stop=self.stop, transient=is_throttled,
                                 refresh=self.refresh, batch_size=batch_size)


def test_one_refused_node_never_holds_back_its_batch():
    cloud = Cloud({f"n{k}": stopcore.LIVE for k in range(5)}, refuse=frozenset({"n2"}))
    report = stopcore.stop_every(list(cloud.states), cloud.plan(), simulated_clock(), "over budget")
    assert sorted(o.node for o in report.stopped) == ["n0", "n1", "n3", "n4"]
    assert [o.node for o in report.failed] == ["n2"] and "refused" in report.failed[0].reason
    assert not report.complete and report.problems()[0].startswith("n2: over budget")


def test_starting_nodes_are_watched_and_stopped_once_they_run():
    cloud = Cloud({"a": stopcore.LIVE, "b": stopcore.STARTING, "c": stopcore.STOPPED}, runs_after=3)
    report = stopcore.stop_every(list(cloud.states), cloud.plan(), simulated_clock(), "ttl")
    assert sorted(o.node for o in report.stopped) == ["a", "b"] and report.complete
    assert [(o.node, o.reason) for o in report.left] == [("c", stopcore.STOPPED)]
    assert ["b"] not in cloud.calls[:1], "a starting node is not put in the first batch"


def test_a_node_still_starting_when_time_runs_out_is_reported_waiting_and_fails_the_invocation():
    cloud = Cloud({"a": stopcore.LIVE, "b": stopcore.STARTING}, runs_after=10_000)
    report = stopcore.stop_every(list(cloud.states), cloud.plan(), simulated_clock(60), "over budget")
    assert [o.node for o in report.stopped] == ["a"] and [o.node for o in report.waiting] == ["b"]
    assert not report.complete and "next run" in report.problems()[0]
    assert any(line.startswith("p: WAITING to stop b") for line in report.lines("p:"))


def test_batches_hold_one_group_and_at_most_the_batch_size():
    cloud = Cloud({f"{g}{k}": stopcore.LIVE for g in "xy" for k in range(5)})
    plan = cloud.plan(batch_size=3)
    plan.group = lambda n: n[0]
    stopcore.stop_every(list(cloud.states), plan, simulated_clock(), "r")
    assert cloud.calls == [["x0", "x1", "x2"], ["x3", "x4"], ["y0", "y1", "y2"], ["y3", "y4"]]


# ---------------------------------------------------------------- the budget

@pytest.mark.parametrize("cost,amount,currency,why", [
    (math.nan, 100, "USD", "not a finite amount"),
    ("Infinity", 100, "USD", "not a finite amount"),
    ("about 5", 100, "USD", "not a number"),
    (None, 100, "USD", "missing"),
    (True, 100, "USD", "True"),
    (5, 0, "USD", "not a positive amount"),
    (5, 100, "EUR", "in 'EUR', the limit in 'USD'"),
    (5, 100, None, "in None"),
])
def test_a_spend_that_cannot_be_judged_counts_as_over_the_limit(cost, amount, currency, why):
    verdict = stopcore.judge_spend(cost, amount, currency="USD", cost_currency=currency, deployed_limit=None)
    assert verdict.stop and verdict.unreadable and why in verdict.reason


def test_the_limit_is_the_larger_of_the_budgets_and_the_deployed_one():
    assert stopcore.judge_spend(100, 100, currency="USD", cost_currency="USD", deployed_limit=None).stop
    assert not stopcore.judge_spend(150, 100, currency="USD", cost_currency="USD", deployed_limit=200).stop
    assert stopcore.judge_spend(150, 200, currency="USD", cost_currency="USD", deployed_limit=120).stop is False
    assert stopcore.judge_spend("250.5", 200, currency="USD", cost_currency="USD", deployed_limit=120).stop


@pytest.mark.parametrize("moment,zone,month", [
    (datetime(2026, 7, 31, 23, 30, tzinfo=timezone.utc), stopcore.UTC, "2026-07"),
    (datetime(2026, 8, 1, 0, 0, tzinfo=timezone.utc), stopcore.UTC, "2026-08"),
    (datetime(2026, 8, 1, 7, 59, tzinfo=timezone.utc), stopcore.PACIFIC, "2026-07"),
    (datetime(2026, 8, 1, 8, 0, tzinfo=timezone.utc), stopcore.PACIFIC, "2026-08"),
    (datetime(2026, 7, 31, 15, 59, tzinfo=timezone.utc), stopcore.BEIJING, "2026-07"),
    (datetime(2026, 7, 31, 16, 0, tzinfo=timezone.utc), stopcore.BEIJING, "2026-08"),
])
def test_budget_months_turn_on_each_clouds_clock(moment, zone, month):
    """Literal anchors: AWS at midnight UTC, Google Cloud at midnight UTC-8, Alibaba at midnight UTC+8."""
    assert stopcore.budget_month(moment, zone) == month


# ---------------------------------------------------------------- time to live and idle

NOW = datetime(2026, 7, 20, 8, 0, tzinfo=timezone.utc)


def test_the_time_to_live_counts_from_the_start_and_an_unknown_start_is_reported():
    assert stopcore.ttl_due(NOW - timedelta(hours=24), 24, NOW).startswith("time to live expired")
    assert stopcore.ttl_due(NOW - timedelta(hours=23, minutes=59), 24, NOW) is None
    with pytest.raises(stopcore.Unjudgeable, match="no start time"):
        stopcore.ttl_due(None, 24, NOW)
    with pytest.raises(stopcore.Unjudgeable, match="no time zone"):
        stopcore.ttl_due(datetime(2026, 7, 1), 24, NOW)


def test_a_time_to_live_past_the_calendars_end_is_reported_not_raised():
    """A TTL tag or setting of 1e12 hours: the node is reported as unjudgeable, the invocation goes on."""
    with pytest.raises(stopcore.Unjudgeable, match="1000000000000 h runs past the last date"):
        stopcore.ttl_due(NOW, 1e12, NOW)


def test_the_bills_clock_turns_a_naive_moment_as_utc():
    """Literal anchor: 2026-12-31 23:30 UTC is 2027-01-01 07:30 in Beijing (UTC+8)."""
    assert stopcore.on_clock(datetime(2026, 12, 31, 23, 30), stopcore.BEIJING).strftime("%Y-%m-%d %H:%M") == \
        "2027-01-01 07:30"


@pytest.mark.parametrize("values,idle", [
    ([0.1] * 6, True),
    ([0.1] * 5, True),  # the newest period may not be written yet
    ([0.1] * 4, False),  # the window is not covered
    ([], False),
    (None, False),
    ([0.1] * 5 + [0.6], False),
    ([0.1] * 5 + [math.nan], False),  # missing data is not idleness
    ([0.1] * 5 + [None], False),
])
def test_idle_needs_the_window_covered_and_every_period_under_the_threshold(values, idle):
    assert (stopcore.idle_due(values, 30, 5, 0.5) is not None) is idle


def test_the_idle_threshold_is_half_a_core_capped_at_five_percent():
    assert stopcore.idle_cpu_percent(96) == pytest.approx(50 / 96)
    assert stopcore.idle_cpu_percent(4) == 5.0


@pytest.mark.parametrize("vcpus,percent", [(192, 0.2604), (96, 0.5208), (16, 3.125), (8, 5.0), (4, 5.0)])
def test_every_clouds_idle_threshold_is_the_cores(vcpus, percent):
    """AWS's idle alarm, Azure's function setting and Google's function (stopcore itself) apply one rule: a p5's 192
    vCPUs are idle under 0.26 % (half a core), a g5.2xlarge's 8 under 5 %."""
    from goldenenv.clouds.aws import teardown
    from goldenenv.clouds.azure import budget as azure_budget

    assert stopcore.idle_cpu_percent(vcpus) == pytest.approx(percent, abs=1e-4)
    assert teardown.idle_cpu_threshold(vcpus) == stopcore.idle_cpu_percent(vcpus)
    assert azure_budget.idle_cpu_percent(vcpus) == stopcore.idle_cpu_percent(vcpus)


@pytest.mark.parametrize("text,value", [("24", 24.0), ("0", None), ("-1", None), ("nan", None), ("inf", None),
                                        ("", None), (None, None), ("soon", None)])
def test_a_setting_is_a_positive_finite_number_or_unset(text, value):
    assert stopcore.positive(text) == value

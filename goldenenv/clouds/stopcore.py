"""The rules every stack's stop function shares, written once: each cloud's function supplies only its calls.

This file is shipped beside each cloud's stop function, in the function's own package (AWS's reaper, Alibaba's
guard, Google Cloud's stopfn, Azure's stopfn), so it imports the standard library only, nothing of goldenenv, and
does no work at import time. A function imports it as ``from goldenenv.clouds import stopcore`` in the repository
and as ``import stopcore`` where it is deployed.

What it holds:

- the invocation's time (``Clock``): a deadline, sleeps that never pass it, and the jitter's random numbers, all
  injectable so tests never sleep;
- ``retry``: exponential backoff with full jitter
  (https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/) on throttling and transient errors,
  for as long as the invocation's time allows; each cloud says which errors are transient;
- ``all_pages``: every page of a listing, each page retried; a listing that cannot be completed raises
  ``ListingIncomplete`` and is never read as "no nodes";
- ``stop_every``: stop every live node, in batches, a failed batch retried node by node so one node never holds back
  the others; nodes still starting are watched while the invocation's time allows and stopped once they can be, else
  reported as waiting for the next run; the report fails the invocation while any node is failed or waiting;
- the month a budget counts in, the spend verdict that fails closed, the time to live and the idle window.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, Generic, TypeVar

T = TypeVar("T")
N = TypeVar("N")

UTC = timezone.utc
"""AWS Budgets' monthly periods start at 00:00 UTC on the 1st ("If you chose MONTHLY, AWS set your start date to
01/01/18 00:00 UTC":
https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_budgets_TimePeriod.html)."""
PACIFIC = timezone(timedelta(hours=-8), "US/Pacific standard")
"""Google Cloud budget months begin at 12 AM US and Canadian Pacific Time, UTC-8
(https://cloud.google.com/billing/docs/reference/budget/rest/v1/billingAccounts.budgets)."""
BEIJING = timezone(timedelta(hours=8), "Asia/Shanghai")
"""Alibaba Cloud's billing cycles are Beijing time, UTC+8, with no daylight saving time (BSS OpenAPI
DescribeSplitItemBill: https://www.alibabacloud.com/help/en/user-center/developer-reference/
api-bssopenapi-2017-12-14-describesplititembill)."""

LIVE, STARTING, STOPPING, STOPPED = "live", "starting", "stopping", "stopped"
"""A node's state class. live: running, a stop acts on it. starting: the cloud refuses (or would refuse) a stop
until it runs: watched, stopped once it can be. stopping and stopped: left alone, nothing to do."""
STATE_CLASSES = (LIVE, STARTING, STOPPING, STOPPED)

RETRY_BASE_SECONDS, RETRY_CAP_SECONDS = 0.5, 20.0
"""Backoff of attempt n: a uniform random wait in [0, min(cap, base * 2**n)] (full jitter)."""
POLL_SECONDS = 10.0
"""How often nodes still starting are looked at again within one invocation."""


class ListingIncomplete(RuntimeError):
    """A listing that could not be read to its end: the nodes are unknown, which is never "no nodes"."""


class OutOfTime(RuntimeError):
    """The invocation's time is spent."""


class Unreadable(ValueError):
    """An amount or a bill that cannot be read: judged as over the limit (fail closed)."""


class Unjudgeable(ValueError):
    """A node whose start time cannot be read: reported, never silently kept or stopped."""


# ---------------------------------------------------------------- time

class Clock:
    """One invocation's time: started at construction, a deadline ``budget_seconds - margin_seconds`` later.

    ``monotonic``, ``sleep`` and ``rng`` are injectable: tests pass a simulated clock whose sleep only moves its
    time forward, so nothing in a test really waits."""

    def __init__(self, budget_seconds: float, *, margin_seconds: float = 0.0,
                 monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None):
        self._monotonic, self._sleep = monotonic, sleep
        self.random = rng or random.Random()
        self.started = monotonic()
        self.deadline = self.started + max(0.0, budget_seconds - margin_seconds)

    def elapsed(self) -> float:
        return self._monotonic() - self.started

    def left(self) -> float:
        """Seconds left before the deadline (0 when past it)."""
        return max(0.0, self.deadline - self._monotonic())

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, never past the deadline; OutOfTime when the wait does not fit."""
        if seconds > self.left():
            raise OutOfTime(f"{seconds:.1f} s to wait, {self.left():.1f} s left in this invocation")
        if seconds > 0:
            self._sleep(seconds)

    def backoff(self, attempt: int, base: float = RETRY_BASE_SECONDS, cap: float = RETRY_CAP_SECONDS) -> float:
        """The full-jitter wait before retry ``attempt`` (0 for the first retry)."""
        return self.random.uniform(0.0, min(cap, base * 2 ** min(attempt, 30)))


# ---------------------------------------------------------------- calls

def retry(call: Callable[[], T], transient: Callable[[BaseException], bool], clock: Clock) -> T:
    """``call()``, again after a full-jitter backoff while it fails with an error ``transient`` accepts (throttling,
    5xx, a timeout, no answer), for as long as the invocation's time allows. Any other error, or the last transient
    one when no time is left for another wait, is raised as it came."""
    attempt = 0
    while True:
        try:
            return call()
        except Exception as error:
            if not transient(error):
                raise
            wait = clock.backoff(attempt)
            if wait >= clock.left():
                raise
            clock.sleep(wait)
            attempt += 1


def all_pages(fetch_page: Callable[[Any], tuple[Sequence[T], Any]], clock: Clock,
              transient: Callable[[BaseException], bool], what: str = "the listing") -> list[T]:
    """Every item of a paged listing. ``fetch_page(token)`` returns (items, next token or None); the first call gets
    None. Each page is retried (``retry``); a page that never comes, or a next token seen before (a loop), raises
    ListingIncomplete naming the page, so a partial listing is never taken for the whole."""
    found: list[T] = []
    token: Any = None
    seen: set[Any] = set()
    page = 1
    while True:
        try:
            items, token = retry(lambda: fetch_page(token), transient, clock)
        except Exception as error:
            raise ListingIncomplete(f"{what}: page {page} could not be read ({error}); "
                                    f"{len(found)} item(s) read before it") from error
        found.extend(items)
        if not token:
            return found
        if token in seen:
            raise ListingIncomplete(f"{what}: page {page + 1} repeats a page token seen before; the listing loops")
        seen.add(token)
        page += 1


# ---------------------------------------------------------------- stopping

@dataclass(frozen=True)
class Outcome:
    node: str
    reason: str


@dataclass
class StopReport:
    """What one invocation did to each node. It fails the invocation while any node is failed or waiting."""

    stopped: list[Outcome] = field(default_factory=list)
    waiting: list[Outcome] = field(default_factory=list)
    """Nodes still starting when the invocation's time ran out: the next run stops them."""
    failed: list[Outcome] = field(default_factory=list)
    left: list[Outcome] = field(default_factory=list)
    """Nodes already stopping or stopped, or gone: nothing to do."""

    @property
    def complete(self) -> bool:
        return not self.failed and not self.waiting

    def lines(self, prefix: str, verb: str = "stop") -> list[str]:
        """One log line per node, and a count."""
        lines = [f"{prefix} {verb} {o.node} ({o.reason})" for o in self.stopped]
        lines += [f"{prefix} WAITING to {verb} {o.node}: {o.reason}" for o in self.waiting]
        lines += [f"{prefix} FAILED to {verb} {o.node}: {o.reason}" for o in self.failed]
        lines += [f"{prefix} leave {o.node}: {o.reason}" for o in self.left]
        return lines

    def problems(self) -> list[str]:
        """The failed and waiting nodes, each with its reason: what fails the invocation."""
        return ([f"{o.node}: {o.reason}" for o in self.failed]
                + [f"{o.node}: not stopped yet, {o.reason}" for o in self.waiting])


@dataclass
class StopPlan(Generic[N]):
    """A cloud's calls for ``stop_every``.

    name: a node's unique, readable name (the report's and the refresh's key). state: its state class (one of
    STATE_CLASSES). stop: stop a batch of nodes (raises on failure; a batch of one raises that node's error).
    refresh: the same nodes as the cloud lists them now (a node missing from the answer is gone).
    not_yet: an error that says the node cannot be stopped yet because it is still starting (then it is watched).
    group: nodes of one group may share a batch (e.g. one scale set); default one group.
    """

    name: Callable[[N], str]
    state: Callable[[N], str]
    stop: Callable[[list[N]], Any]
    transient: Callable[[BaseException], bool]
    refresh: Callable[[list[N]], Sequence[N]] | None = None
    not_yet: Callable[[BaseException], bool] = lambda error: False
    group: Callable[[N], Hashable] = lambda node: None
    batch_size: int = 1
    poll_seconds: float = POLL_SECONDS


def stop_every(nodes: Sequence[N], plan: StopPlan[N], clock: Clock, reason: Callable[[N], str] | str) -> StopReport:
    """Stop every live node of ``nodes``; watch those starting and stop each once it can be (see StopReport)."""
    why = reason if callable(reason) else (lambda node: reason)
    report = StopReport()
    live, waiting = [], []
    for node in nodes:
        state = plan.state(node)
        if state == LIVE:
            live.append(node)
        elif state == STARTING:
            waiting.append(node)
        else:
            report.left.append(Outcome(plan.name(node), state))
    waiting += _stop_batches(live, plan, clock, why, report)
    if waiting and plan.refresh is None:
        report.waiting += [Outcome(plan.name(n), "still starting: the next run stops it") for n in waiting]
        return report
    while waiting and clock.left() > plan.poll_seconds:
        clock.sleep(plan.poll_seconds)
        try:
            now = {plan.name(n): n for n in retry(lambda: plan.refresh(list(waiting)), plan.transient, clock)}
        except Exception as error:
            report.failed += [Outcome(plan.name(n), f"still starting, and could not be looked at again: {error}")
                              for n in waiting]
            return report
        ready = []
        for node in waiting:
            current = now.get(plan.name(node))
            state = plan.state(current) if current is not None else None
            if state == LIVE:
                ready.append(current)
            elif state == STARTING:
                continue
            else:
                report.left.append(Outcome(plan.name(node), f"was starting, now {state or 'gone'}"))
        names = {plan.name(n) for n in ready}
        still = [now[plan.name(n)] for n in waiting
                 if plan.name(n) in now and plan.state(now[plan.name(n)]) == STARTING and plan.name(n) not in names]
        waiting = still + _stop_batches(ready, plan, clock, why, report)
    report.waiting += [Outcome(plan.name(n), f"still starting after {clock.elapsed():.0f} s of this invocation: "
                                             "the cloud stops a node only once it runs; the next run stops it")
                       for n in waiting]
    return report


def _stop_batches(nodes: list[N], plan: StopPlan[N], clock: Clock, why: Callable[[N], str],
                  report: StopReport) -> list[N]:
    """Stop ``nodes`` in batches of one group; a failed batch is retried node by node. Returns the nodes the cloud
    refused because they are still starting."""
    waiting: list[N] = []
    groups: dict[Hashable, list[N]] = {}
    for node in nodes:
        groups.setdefault(plan.group(node), []).append(node)
    for members in groups.values():
        for start in range(0, len(members), max(1, plan.batch_size)):
            batch = members[start:start + max(1, plan.batch_size)]
            try:
                retry(lambda: plan.stop(batch), plan.transient, clock)
            except Exception as error:
                if len(batch) == 1:
                    _failed_one(batch[0], error, plan, why, report, waiting)
                    continue
                for node in batch:
                    try:
                        retry(lambda: plan.stop([node]), plan.transient, clock)
                    except Exception as single:
                        _failed_one(node, single, plan, why, report, waiting)
                    else:
                        report.stopped.append(Outcome(plan.name(node), why(node)))
            else:
                report.stopped += [Outcome(plan.name(n), why(n)) for n in batch]
    return waiting


def _failed_one(node: N, error: BaseException, plan: StopPlan[N], why: Callable[[N], str], report: StopReport,
                waiting: list[N]) -> None:
    if plan.not_yet(error):
        waiting.append(node)
    else:
        report.failed.append(Outcome(plan.name(node), f"{why(node)}: {error}"))


# ---------------------------------------------------------------- the budget

def on_clock(now: datetime, tz: tzinfo) -> datetime:
    """``now`` on a bill's or budget's clock (UTC, PACIFIC, BEIJING...); a naive ``now`` is taken as UTC.
    2026-12-31T23:30Z is already 2027-01-01 07:30 in Beijing: that bill's month is 2027-01."""
    return (now if now.tzinfo else now.replace(tzinfo=UTC)).astimezone(tz)


def budget_month(now: datetime, tz: tzinfo) -> str:
    """The budget month (YYYY-MM) that ``now`` falls in on the budget's clock (on_clock)."""
    return on_clock(now, tz).strftime("%Y-%m")


def amount(value: Any, what: str) -> float:
    """A money amount as a finite float: a JSON number or text that reads as one; Unreadable otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise Unreadable(f"{what} is {'missing' if value is None else repr(value)}")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):
        raise Unreadable(f"{what} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise Unreadable(f"{what} is {value!r}, not a finite amount")
    return number


@dataclass(frozen=True)
class Verdict:
    stop: bool
    reason: str
    unreadable: bool = False
    """The spend could not be read: the verdict is to stop (fail closed); log it at ERROR."""


def judge_spend(cost: Any, budget: Any, *, currency: str, cost_currency: Any, deployed_limit: float | None,
                what: str = "the budget", cost_name: str = "the cost", budget_name: str = "the amount") -> Verdict:
    """Whether a month's spend calls for the hard stop. The limit is the larger of the budget's own amount and the
    limit the function was deployed with (a budget raised by `up` ends the stop). Fails closed: a cost or amount
    that is missing, not a number, NaN or infinite, a budget amount that is not positive, or a cost in another
    currency than the stack's counts as over the limit."""
    try:
        spent = amount(cost, cost_name)
        budget_amount = amount(budget, budget_name)
        if budget_amount <= 0:
            raise Unreadable(f"{budget_name} {budget_amount:g} is not a positive amount")
    except Unreadable as problem:
        return Verdict(True, f"{what} cannot be read ({problem}): treated as over the limit", True)
    if cost_currency != currency:
        return Verdict(True, f"{what} is in {cost_currency!r}, the limit in {currency!r}: {spent:,.2f} cannot be "
                             "compared with the limit, so it is treated as over it", True)
    limit = max(budget_amount, deployed_limit) if deployed_limit and math.isfinite(deployed_limit) else budget_amount
    raised = f" (the limit as deployed; {what} says {budget_amount:,.2f})" if limit > budget_amount else ""
    text = f"spend {spent:,.2f} {currency} of {limit:,.2f}{raised}"
    if spent >= limit:
        return Verdict(True, f"{text}: at or over the limit")
    return Verdict(False, f"{text}: under the limit")


# ---------------------------------------------------------------- time to live and idle

def ttl_due(started: datetime | None, hours: float, now: datetime, since: str = "its last start") -> str | None:
    """Why a node whose time to live has run out is due; None while it has time left. Unjudgeable when no start
    time with a time zone is known."""
    if started is None:
        raise Unjudgeable("no start time is known")
    if started.tzinfo is None:
        raise Unjudgeable(f"its start time {started.isoformat()} carries no time zone")
    try:
        expires = started + timedelta(hours=hours)
    except OverflowError:
        raise Unjudgeable(f"a time to live of {hours:.15g} h runs past the last date Python can count") from None
    return f"time to live expired at {expires.isoformat()} ({hours:g} h after {since})" if now >= expires else None


def idle_cpu_percent(vcpus: int, cap_percent: float = 5.0, cores: float = 0.5) -> float:
    """The idle CPU threshold in percent, on every cloud: min(5 %, half a core). A GPU job keeps about one core per
    GPU busy, which on a 192-vCPU node is only ~4 % CPU, so a fixed 5 % would stop working nodes."""
    return min(cap_percent, 100.0 * cores / max(int(vcpus or 1), 1))


def idle_due(values: Sequence[Any] | None, idle_minutes: float, period_minutes: float, threshold: float,
             unit: str = "%") -> str | None:
    """Why a node is idle: every period's mean of the last ``idle_minutes`` is under ``threshold`` and the window is
    covered (the newest period may not be written yet, so one period fewer is enough). Missing data, a value that
    is not a finite number, or too few periods is not idleness: None."""
    needed = max(1, math.ceil(idle_minutes / period_minutes) - 1)
    numbers = [v for v in values or [] if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) != len(values or []) or len(numbers) < needed:
        return None
    if not all(math.isfinite(v) and v < threshold for v in numbers):
        return None
    return (f"idle: CPU under {threshold:g}{unit} for {idle_minutes:g} minutes "
            f"(highest {period_minutes:g}-minute mean {max(numbers):.2f}{unit})")


# ---------------------------------------------------------------- settings

def positive(text: str | None) -> float | None:
    """A setting that must be a positive, finite number; None when it is unset or is not one."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def flag(text: str | None) -> bool:
    """A boolean setting: true, 1, yes, on (any case) are on; anything else is off."""
    return (text or "").strip().lower() in ("1", "true", "yes", "on")

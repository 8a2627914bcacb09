"""The shipped stacks the contract tests run over, by cloud: one list, so every rule holds the same stacks (and a
new cloud's stacks join every rule the day they are added)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from goldenenv import clouds, stackconfig

STACKS = Path(__file__).resolve().parents[2] / "stacks"


def pulumi_stacks() -> list[tuple[str, str]]:
    """(cloud, stack) of every shipped stack of a registered cloud built by a Pulumi program."""
    found = []
    for path in sorted(STACKS.glob("Pulumi.*.yaml")):
        cloud = stackconfig.read_stack_file(path).get("goldenenv:cloud")
        if cloud in clouds.names() and clouds.get(cloud).uses_pulumi:
            found.append((cloud, path.name.removeprefix("Pulumi.").removesuffix(".yaml")))
    return found


@functools.cache
def plan_of(stack: str) -> Any:
    """A shipped stack as `goldenenv plan` plans it, once for the whole test run: every contract module reads the
    same plan. Never change it in place; a mutation copies the resources first."""
    from goldenenv import plan

    return plan.plan(stack, STACKS)


def guardrail_findings(planned: Any, resources: Sequence[Any]) -> list[Any]:
    """The guardrails over ``resources`` as `goldenenv plan` runs them on ``planned``'s stack: with what its stack
    file asks of the budget and the lifecycle."""
    from goldenenv import guardrails

    spec = planned.spec
    return guardrails.evaluate(
        resources, spec.stack_tags, budget_opt_out=spec.budget_opt_out,
        hard_stop=bool(spec.budget and spec.budget.hard_stop),
        monthly_limit=spec.budget.monthly_limit if spec.budget else None,
        currency=spec.budget.currency if spec.budget else None,
        ttl_hours=spec.lifecycle.ttl_hours, idle_minutes=spec.lifecycle.idle_minutes)


@functools.cache
def planned(stack: str) -> tuple[Any, list[Any]]:
    """A shipped stack's plan and the guardrails' findings on it as planned, once for the whole test run."""
    plan = plan_of(stack)
    return plan, guardrail_findings(plan, plan.resources)

"""preview / up / destroy of Pulumi clouds through the Automation API, state in a local file backend.

The same program `pulumi up -s STACK` runs. What cannot work here (no Pulumi CLI, no cloud
credentials) is said once, with how to fix it, before anything starts.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from goldenenv.scopedenv import scoped_env
from goldenenv.spec import ClusterSpec


class LifecycleError(RuntimeError):
    """A precondition is missing; the message says how to provide it."""


def workspace_env(here) -> dict[str, str]:
    """The Automation API's environment for a project: a project without runtime.options.virtualenv runs the
    program with this Python, which has goldenenv; without PULUMI_BACKEND_URL, the project's local file backend."""
    env = {"PULUMI_PYTHON_CMD": os.environ.get("PULUMI_PYTHON_CMD", sys.executable)}
    if not os.environ.get("PULUMI_BACKEND_URL"):
        here.state.mkdir(parents=True, exist_ok=True)
        env["PULUMI_BACKEND_URL"] = f"file://{here.state}"
        env["PULUMI_CONFIG_PASSPHRASE"] = os.environ.get("PULUMI_CONFIG_PASSPHRASE", "")
    return env


def guard(spec: ClusterSpec, creating: bool, stacks_dir: Path | None = None, allow_over_budget: bool = False):
    """The offline plan's verdict before Pulumi runs: guardrails, the deploy-readiness rules (plan --strict), the
    cost gate (a run over budget, unless allow_over_budget: `up --allow-over-budget`) and the lock against every
    pool.

    `up` also refuses a stack whose nodes would have no golden image to pull (none pushed for its lock), and a
    pool whose host layer lacks a need that neither its host image carries nor the host lock's install step
    provides (compat host-layer: the engine, the toolkit, the driver, a fabric's module, the file-system client):
    plan shows both as warnings, with what to do.
    """
    from goldenenv.guardrails import Severity
    from goldenenv.compat import HOST_LAYER
    from goldenenv.plan import UNPUBLISHED, plan

    result = plan(spec.stack, stacks_dir, strict=True, allow_over_budget=allow_over_budget)
    blocking = [f for f in result.findings
                if f.severity is Severity.ERROR or (creating and f.rule in (UNPUBLISHED, f"compat:{HOST_LAYER}"))]
    if blocking:
        raise LifecycleError("refused before anything is created:\n" + "\n".join(
            f"  {f.rule}: {f.message}" for f in blocking))
    return result


def preflight(spec: ClusterSpec) -> None:
    if shutil.which("pulumi") is None:
        raise LifecycleError(
            "the Pulumi CLI is not installed: install it (https://www.pulumi.com/docs/install/), or see the stack "
            f"offline with `goldenenv plan -s {spec.stack}` (no CLI, no credentials)"
        )
    from goldenenv import clouds

    _cloud_step(clouds.get(spec.cloud).preflight, spec)


def stack(spec: ClusterSpec):
    """The Automation API stack for this stack file, on the user's backend or a local file backend."""
    from pulumi import automation as auto

    from goldenenv import project

    preflight(spec)
    here = project.current()
    workspace = auto.LocalWorkspace(work_dir=str(here.root), env_vars=workspace_env(here))
    return auto.Stack.create_or_select(spec.stack, workspace)


def outputs(spec: ClusterSpec) -> dict:
    """The stack's current outputs (node addresses, hostfile ...) from its Pulumi backend."""
    return {k: v.value for k, v in stack(spec).outputs().items()}


def preview(spec: ClusterSpec, log: Callable[[str], None] = print):
    """`pulumi preview --refresh`: what an `up` would do against the cloud as it is now (see `up`)."""
    guard(spec, creating=False)
    return stack(spec).preview(on_output=log, refresh=True)


def up(spec: ClusterSpec, log: Callable[[str], None] = print, roll_nodes: list[str] | None = None,
       one_at_a_time: bool = True, target=None, allow_over_budget: bool = False,
       sleep: Callable[[float], None] = time.sleep) -> dict:
    """Refuse what the offline plan refuses, prepare the retained stores for adoption, then `pulumi up --refresh`.

    The refresh first reads every resource back from the cloud, so a node that is gone (a one-time spot node
    reclaimed or terminated by the budget's hard stop, an Alibaba spot node released) leaves the state and the
    same `up` creates it again; without it Pulumi trusts its state and reports no changes. A plain `pulumi up`
    refreshes too: the project file says `options: refresh: always`.

    Running nodes keep what they booted with (AWS: their launch template version; Alibaba: their boot script); with
    roll_nodes (all, pool names or node names), the nodes named whose template or script has moved are then
    replaced onto it, one `up` per node unless one_at_a_time is False.

    When the cloud has no capacity where the stack is, `up` moves on through the placements the stack allows
    (`goldenenv:zones`, each pool's `capacityFallback`; goldenenv.failover) and writes the one that worked into the
    stack file; a quota or a fatal error stops it, saying every attempt and what to do.
    """
    judged = guard(spec, creating=True, allow_over_budget=allow_over_budget)
    if allow_over_budget and judged is not None:
        from goldenenv.plan import OVER_BUDGET_RULES

        for finding in judged.findings:
            if finding.rule in OVER_BUDGET_RULES:
                log(f"{finding.rule}: {finding.message}")
    target = target or stack(spec)
    _before_up(spec, log)
    result = _up_with_failover(spec, target, log, sleep)
    if roll_nodes is not None:
        from goldenenv import updates

        nodes = roll_targets(spec, roll_nodes, updates.last_deployment(spec.stack)[0])
        if updates.roll(target, nodes, log, one_at_a_time):
            return {k: v.value for k, v in target.outputs().items()}
    return {k: v.value for k, v in result.outputs.items()}


def _up_with_failover(spec: ClusterSpec, target, log: Callable[[str], None], sleep: Callable[[float], None]):
    """`pulumi up --refresh` at each placement the stack allows until one succeeds (one placement: a plain up whose
    failure is still read for its cause). Once the cluster exists only its zone is tried; the placement that
    worked is recorded in the stack file when it is not what the file says."""
    from goldenenv import failover, stackconfig
    from goldenenv.plan import stack_file

    deployed = bool(target.outputs())
    order = failover.stack_order(spec, zone_fixed=deployed)
    if deployed and spec.zones and len(spec.zones) > 1:
        log(f"{spec.stack} exists in {spec.placed_zone}: up tries only that zone (moving would replace its subnet, "
            "nodes, head and parallel file system); destroy first to move it")
    as_filed = failover.stack_order(spec)[0]
    results = []

    def deploy(placement: failover.Placement):
        if placement == as_filed:  # what the stack file says: the program reads it as it is
            results.append(target.up(on_output=log, refresh=True))
            return
        wanted = {"zone": placement.zone, "capacity": dict(placement.capacity)}
        with scoped_env(target.workspace.env_vars, stackconfig.PLACEMENT_ENV, json.dumps(wanted)):
            results.append(target.up(on_output=log, refresh=True))

    try:
        outcome = failover.run(deploy, order, spec.cloud, log, sleep, pools=failover.stack_pools(spec),
                               region=spec.region)
    except failover.FailoverStopped as e:
        raise LifecycleError(f"up of {spec.stack} stopped:\n{e}") from None
    placed = outcome.placement
    changed = {pool.name: placed.capacity_of(pool.name) for pool in spec.nodes
               if placed.capacity_of(pool.name) != pool.capacity.value}
    zone = placed.zone if placed.zone and placed.zone != spec.zone else None
    if zone or changed:
        tried = "; ".join(f"{a.placement}: {a.error.code}" for a in outcome.attempts if a.error)
        stackconfig.record_placement(stack_file(spec.stack), zone, changed,
                                     f"goldenenv up found capacity here{f' (after {tried})' if tried else ''}")
        log(f"recorded in the stack file: {placed} (later ups, and pulumi up, stay there)")
    return results[-1]


def roll_targets(spec: ClusterSpec, requested: list[str], deployment) -> list[str]:
    """The nodes to replace: those named (all, a pool, pool-index) whose boot template or script has moved on.

    Without the deployment (a backend plan cannot read), the named nodes are rolled as named: a node already on
    its current template or script is left alone by Pulumi anyway.
    """
    from goldenenv import updates

    nodes = [f"{pool.name}-{i}" for pool in spec.nodes for i in range(pool.count)]
    pools = {pool.name for pool in spec.nodes}
    unknown = [n for n in requested if n != "all" and n not in pools and n not in nodes]
    if unknown:
        raise LifecycleError(f"--roll-nodes: {', '.join(unknown)} is not a node of {spec.stack}; valid: all, "
                             f"{', '.join(sorted(pools))}, {', '.join(nodes)}")
    named = [n for n in nodes if {"all", n, n.rsplit("-", 1)[0]} & set(requested)]
    if deployment is None:
        return named
    stale = set(updates.stale_nodes(deployment))
    return [n for n in named if n in stale]


def _before_up(spec: ClusterSpec, log: Callable[[str], None]) -> None:
    """The cloud's step before any `up`: find the retained stores it adopts and make the import match."""
    from goldenenv import clouds

    _cloud_step(clouds.get(spec.cloud).before_up, spec, log)


def _cloud_step(step: Callable, *args):
    """A cloud's own step before or after Pulumi: its errors become one LifecycleError line."""
    from goldenenv.spec import ConfigError

    try:
        return step(*args)
    except ConfigError:
        raise
    except RuntimeError as e:
        raise LifecycleError(str(e)) from None


def image_repository(spec: ClusterSpec, log: Callable[[str], None] = print) -> str:
    """Create only the stack's image repository (a targeted up) and return its URL, so the image can be pushed
    before the nodes that pull it exist."""
    from goldenenv import clouds

    cloud = clouds.get(spec.cloud)
    _cloud_step(cloud.preflight, spec)  # no targeted up, and no push, without a login on the stack's cloud
    planned = guard(spec, creating=False)
    kinds = tuple(cloud.registry_types)
    wanted = [r for r in planned.resources if kinds and r.type.startswith((*kinds, "pulumi:providers:"))]
    if not wanted:
        raise LifecycleError(f"stack {spec.stack} declares no image repository: push with --registry instead")
    by_urn = {r.urn: r for r in planned.resources}
    targets = set()
    for r in wanted:
        while r is not None:
            targets.add(r.urn)
            r = by_urn.get(r.parent_urn)
    target = stack(spec)
    _before_up(spec, log)
    target.up(on_output=log, target=sorted(targets))
    return _cloud_step(cloud.registry_url, spec)


def registry_auth(spec: ClusterSpec, registry: str) -> dict | None:
    """Docker credentials for the stack's registry, from the caller's cloud credentials."""
    from goldenenv import clouds

    return _cloud_step(clouds.get(spec.cloud).registry_auth, spec, registry)


def registry_pulled_as(spec: ClusterSpec, url: str) -> str:
    """The stack's repository as its nodes name it, which a push to `url` is recorded under."""
    from goldenenv import clouds

    return clouds.get(spec.cloud).registry_pulled_as(spec, url)


def destroy(spec: ClusterSpec, purge_data: bool = False, log: Callable[[str], None] = print,
            skip_export: bool = False, target=None, head: Callable[[dict], Any] | None = None,
            drop_accounting: bool = False) -> list[str]:
    """Destroy the stack: first the Slurm accounting history is exported to the shared file system (headhistory:
    `head` gives the head's root client from the stack outputs; a failed export stops here, unless
    drop_accounting), then the cloud's own step (AWS: export the parallel file system to the bucket and
    wait; a failed export stops here, before anything is deleted or purged), then `pulumi destroy`. The retained
    stores stay unless the data is purged by name; asked for so, they are purged even when `pulumi destroy` fails
    part way, and the failure is then raised saying what was purged, what is left and how to finish."""
    from goldenenv import clouds, headhistory

    cloud = clouds.get(spec.cloud)
    target = target or stack(spec)
    outputs = {k: v.value for k, v in target.outputs().items()}
    reach = (lambda: head(outputs)) if head else None
    _cloud_step(headhistory.export_before_destroy, spec, reach, drop_accounting, skip_export, log)
    _cloud_step(cloud.before_destroy, spec, outputs, skip_export, log)
    try:
        _pulumi_destroy(target, cloud, log)
    except Exception as e:  # noqa: BLE001 - auto.CommandError and whatever the backend raises: said, then raised
        raise _destroy_failed(spec, cloud, outputs, target, e, purge_data, log) from e
    if purge_data:
        return _cloud_step(cloud.purge, spec, outputs, log)
    if outputs.get("bucket"):
        log(f"kept bucket {outputs['bucket']} (datasets and checkpoints) and the image repository: the next up "
            "adopts them; delete them with --purge-data")
    return []


def _pulumi_destroy(target, cloud, log: Callable[[str], None]) -> None:
    """`pulumi destroy`, running the program when the cloud's resources carry delete hooks (AWS: a persistent spot
    node cancels its request before it is deleted); Pulumi refuses such a destroy without the program. The program
    then knows it runs for a destroy (DESTROYING_ENV) and does not refuse a lock that no longer fits the nodes."""
    from goldenenv.clouds.base import DESTROYING_ENV

    if not cloud.destroy_runs_program:
        target.destroy(on_output=log)
        return
    with scoped_env(target.workspace.env_vars, DESTROYING_ENV, "1"):
        target.destroy(on_output=log, run_program=True)


def _destroy_failed(spec: ClusterSpec, cloud, outputs: dict, target, error: Exception, purge_data: bool,
                    log: Callable[[str], None]) -> LifecycleError:
    """What a `pulumi destroy` that failed part way leaves, after purging the retained stores if they were asked
    for by name (--purge-data): the user's request does not depend on the rest of the teardown."""
    lines = [f"pulumi destroy of {spec.stack} failed part way: {_tail(str(error)) or type(error).__name__}"]
    again = f"goldenenv destroy -s {spec.stack}"
    if purge_data:
        try:
            purged = _cloud_step(cloud.purge, spec, outputs, log)
            lines.append("--purge-data deleted the retained stores all the same, as asked: "
                         + (", ".join(purged) if purged else "none was left to delete"))
            if spec.storage.parallel_fs.enabled:
                again += " --skip-export"  # the bucket the parallel file system would export to is gone
        except Exception as e:  # noqa: BLE001 - the destroy's error must still reach the user
            lines.append(f"--purge-data could not delete the retained stores ({e}): they are still there")
            again += " --purge-data"
    elif outputs.get("bucket"):
        lines.append(f"the retained stores are kept (bucket {outputs['bucket']} and the image repository)")
    lines.append(f"still in the stack: {_left_in_state(target, spec)}")
    lines += cloud.destroy_hints(spec, outputs, str(error))
    lines.append(f"fix the cause above, then run `{again}` to finish")
    return LifecycleError("\n".join(lines))


def _tail(text: str, lines: int = 6, limit: int = 800) -> str:
    """The end of a Pulumi error, where the provider's message is."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " / ".join(kept)[-limit:]


def _left_in_state(target, spec: ClusterSpec) -> str:
    """The resources the stack's state still holds after a failed destroy, from its export."""
    try:
        resources = target.export_stack().deployment.get("resources") or []
    except Exception:  # noqa: BLE001 - a backend that cannot export: say where to look instead
        return f"see `pulumi stack -s {spec.stack}`"
    left = [f"{r.get('type', '').rsplit(':', 1)[-1]} {r.get('id') or r.get('urn', '').rsplit('::', 1)[-1]}"
            for r in resources if r.get("custom") and not str(r.get("type", "")).startswith("pulumi:")]
    return ", ".join(left) if left else "nothing"

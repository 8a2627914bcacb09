"""Offline plan: the stack's Pulumi program evaluated under Pulumi's mock runtime.

No CLI, no credentials, nothing created. The same program `pulumi up` runs registers its
resources with a recording monitor; the plan then prices the stack line by line (goldenenv.costs),
judges the cost against the budget and runs the guardrails over what was recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.settings import SETTINGS
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from goldenenv import (catalog, clouds, coldstart, compat, costgate, costs, failover, guardrails, headhistory,
                       project, stackconfig, updates)
from goldenenv.clouds.base import head_shape
from goldenenv.guardrails import Finding, PlannedResource, Severity
from goldenenv.images import host as hostlayer
from goldenenv.images import lock as image_lock
from goldenenv.images import publish
from goldenenv.spec import Capacity, ClusterSpec

PROJECT = "goldenenv"
HOURS_PER_MONTH = costs.HOURS_PER_MONTH


@dataclass(frozen=True)
class PoolCost:
    pool: str
    instance_type: str
    count: int
    capacity: str
    usd_per_hour: float | None
    """For all nodes of the pool; None when the catalog has no price."""
    price: catalog.Price | None

    @property
    def usd_per_month(self) -> float | None:
        return None if self.usd_per_hour is None else self.usd_per_hour * HOURS_PER_MONTH


@dataclass
class Plan:
    stack: str
    spec: ClusterSpec
    resources: list[PlannedResource]
    outputs: dict[str, Any]
    costs: list[PoolCost]
    findings: list[Finding] = field(default_factory=list)
    compat: list[compat.PoolCompat] = field(default_factory=list)
    cold_start: coldstart.ColdStart | None = None
    destroy_steps: list[str] = field(default_factory=list)
    """What `destroy` does before deleting anything (e.g. export the parallel file system to the bucket)."""
    node_changes: list[updates.NodeChange] = field(default_factory=list)
    """What an `up` from the last deployment does to each node (empty without a prior deployment)."""
    update_notes: list[str] = field(default_factory=list)
    """Where the prior deployment came from, or how template changes reach nodes when there is none."""
    lines: list[costs.Line] = field(default_factory=list)
    """The stack's cost line by line (costs.stack_lines): per hour at full use, and idle time per run."""
    capacity_steps: list[costgate.Step] = field(default_factory=list)
    """Each set of capacity types in up's failover order, priced (costgate.steps): what the cost gate judges."""

    @property
    def fabrics(self) -> list[tuple[str, catalog.FabricRate]]:
        """Each pool's RDMA fabric as NCCL uses it between nodes (pool_fabrics)."""
        return pool_fabrics(self.spec)

    @property
    def failed(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.findings)

    @property
    def usd_per_hour(self) -> float:
        """The stack's hourly cost at full use in `currency`, every priced line (USD on AWS; the name predates
        other currencies)."""
        if self.lines:
            return costs.total(self.lines, "hour")
        return sum(c.usd_per_hour or 0.0 for c in self.costs)

    @property
    def unpriced(self) -> list[str]:
        """The instance types whose compute the catalog cannot price (the stack's total is then unknown)."""
        return _unpriced_compute(self.spec, self.lines)

    @property
    def run_lines(self) -> list[costs.Line]:
        """The projected cost of the stack's `goldenenv:run`, line by line; [] without one."""
        return costs.run_lines(self.spec, self.lines)

    @property
    def run_cost(self) -> float | None:
        return costs.total(self.run_lines, "run") if self.spec.run else None

    @property
    def currency(self) -> str:
        return costs_currency(self.costs, self.spec.cloud)

    @property
    def dearest_fallback(self) -> costgate.Step | None:
        """The place in up's order the cost gate judged when it costs more than the stack file's own; else None."""
        if len(self.capacity_steps) < 2 or self.unpriced:
            return None
        dearest = max(self.capacity_steps, key=lambda step: (_judged(self.spec, list(step.lines)), step.first))
        return None if dearest.first else dearest

    def of_type(self, type_token: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == type_token]

    @property
    def kept_on_destroy(self) -> list[PlannedResource]:
        """The stores `destroy` leaves in place (retained), which the next `up` adopts by name."""
        return [r for r in self.resources if r.custom and r.retain_on_delete and not r.type.startswith("pulumi:")]

    @property
    def holding_no_data(self) -> list[tuple[PlannedResource, str]]:
        """The stores that say they hold no data (guardrails.HOLDS_TAG, a function's own bucket or account), with
        what they hold instead: no retention rule judges them and destroy deletes them, so the plan names them."""
        found = []
        for r in self.resources:
            kind = guardrails.holds_flag(r.props.get("labels")) or guardrails.holds_flag(r.props.get("tags"))
            if kind and r.custom:
                found.append((r, guardrails.HOLDS_NO_DATA[kind]))
        return found

    @property
    def deleted_on_destroy(self) -> dict[str, int]:
        """Resource kind -> how many `destroy` deletes."""
        counts: dict[str, int] = {}
        for r in self.resources:
            if r.custom and not r.retain_on_delete and not r.type.startswith("pulumi:"):
                kind = r.type.rsplit(":", 1)[-1]
                counts[kind] = counts.get(kind, 0) + 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "resources": [
                {"urn": r.urn, "type": r.type, "name": r.name, "parent": r.parent_urn,
                 "retainOnDelete": r.retain_on_delete, "props": r.props}
                for r in self.resources
            ],
            "outputs": self.outputs,
            "cost": {
                "currency": self.currency,
                "perHour": None if self.unpriced else round(self.usd_per_hour, 2),
                "perMonth": None if self.unpriced else round(self.usd_per_hour * HOURS_PER_MONTH, 2),
                "unpriced": self.unpriced,
                "budgetPerMonth": self.spec.budget.monthly_limit if self.spec.budget else None,
                **({"usdPerHour": round(self.usd_per_hour, 2),
                    "usdPerMonth": round(self.usd_per_hour * HOURS_PER_MONTH, 2),
                    "budgetUsdPerMonth": self.spec.budget.monthly_limit if self.spec.budget else None}
                   if self.currency == "USD" else {}),
                "lines": [line.to_json() for line in self.lines],
                "run": ({"hours": self.spec.run.hours, "idleHours": self.spec.run.idle_hours,
                         "total": round(self.run_cost or 0.0, 2),
                         "lines": [line.to_json() for line in self.run_lines]} if self.spec.run else None),
                "failover": [
                    {"capacity": dict(step.capacity), "zones": list(step.zones), "asFiled": step.first,
                     "perHour": _rounded(costs.total(step.lines, "hour"), step.lines),
                     "run": (_rounded(costs.total(costs.run_lines(self.spec, list(step.lines)), "run"), step.lines)
                             if self.spec.run else None)}
                    for step in self.capacity_steps
                ] if len(self.capacity_steps) > 1 else [],
                "pools": [
                    {"pool": c.pool, "instanceType": c.instance_type, "count": c.count, "capacity": c.capacity,
                     "perHour": c.usd_per_hour, "currency": c.price.currency if c.price else None,
                     "priceRegion": c.price.region if c.price else None,
                     "priceAsOf": c.price.as_of if c.price else None,
                     "priceSource": c.price.source if c.price else None}
                    for c in self.costs
                ],
            },
            "compat": [
                {"pool": c.pool, "instanceType": c.instance_type, "lock": c.lock, "hostImage": c.host.label,
                 "driver": c.driver, "driverSupport": c.driver_level, "ok": c.ok,
                 "hostLayer": host_layer_json(c.layer) if c.layer else None,
                 "conflicts": [{"rule": x.rule, "severity": x.severity, "pins": list(x.pins), "message": x.message}
                               for x in c.conflicts]}
                for c in self.compat
            ],
            "fabrics": [{"pool": pool, "instanceType": r.instance_type, "ports": r.ports, "portGbps": r.port_gbps,
                         "link": r.link, "ncclGbps": r.nccl_gbps} for pool, r in self.fabrics],
            "coldStart": self.cold_start.to_json() if self.cold_start else None,
            "nodes": [{"node": c.node, "pool": c.pool, "action": c.action, "reason": c.reason,
                       "version": c.version, "templateVersion": c.template_version} for c in self.node_changes],
            "updateNotes": self.update_notes,
            "destroy": {
                "first": self.destroy_steps,
                "keeps": [{"type": r.type, "name": r.name, "physicalName": physical_name(r)}
                          for r in self.kept_on_destroy],
                "deletes": self.deleted_on_destroy,
                "holdsNoData": [{"type": r.type, "name": r.name, "physicalName": physical_name(r), "holds": what}
                                for r, what in self.holding_no_data],
            },
            "findings": [
                {"rule": f.rule, "severity": f.severity.value, "urn": f.urn, "message": f.message}
                for f in self.findings
            ],
            "failed": self.failed,
        }


def _rounded(amount: float, lines: Any) -> float | None:
    """An amount for the JSON, or None when a compute line in it has no price (the total is then unknown)."""
    return None if any(line.kind == "compute" and line.amount is None for line in lines) else round(amount, 2)


def __getattr__(name: str) -> Path:
    """STACKS: the current project's stack folder (Pulumi.yaml's stackConfigDir), looked up when read."""
    if name == "STACKS":
        return project.current().stacks
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stack_file(stack: str, stacks_dir: Path | None = None) -> Path:
    """The stack's file in `stacks_dir`, by default the current project's stack folder."""
    return (stacks_dir or project.current().stacks) / f"Pulumi.{stack}.yaml"


def plan(stack: str, stacks_dir: Path | None = None, **options: Any) -> Plan:
    """Evaluate a stack file offline; ConfigError if its configuration is invalid. Options: see plan_config."""
    config = stackconfig.read_stack_file(stack_file(stack, stacks_dir))
    return plan_config(stack, config, **options)


def plan_config(stack: str, config: dict[str, Any], *, context: clouds.BuildContext | None = None,
                prior: updates.Deployment | None = None, prior_note: str | None = None,
                strict: bool = False, allow_over_budget: bool = False) -> Plan:
    """The plan of a stack's configuration.

    context: the build context (the cloud's offline lookups, nodes to roll); by default nothing is known to exist
    and no node rolls. prior: the stack's last deployment (updates.Deployment), so the plan can say what an `up`
    would replace; prior_note says where it came from. strict: also run the cloud's deploy-readiness rules (provider limits and behaviour the mock
    runtime cannot see); `up` always does. allow_over_budget: a run (or an hour) the budget cannot pay is a warning,
    not an error (`--allow-over-budget`).
    """
    values, unknown = stackconfig.namespaced(config)
    spec = stackconfig.load(stack, values, unknown)
    cloud = clouds.validate(spec)
    if cloud.uses_pulumi:
        resources, outputs = run_program(stack, config, context or offline_context(spec), prior)
        pools = pool_costs(spec)
        head = head_shape(spec, cloud)
        lines = costs.stack_lines(spec, resources, head)
        capacity_steps = costgate.steps(spec, resources, head, lines)
    else:
        resources, outputs = cloud.planned_resources(spec), {}
        pools = [PoolCost(p.name, p.instance_type, p.count, p.capacity.value, 0.0, None) for p in spec.nodes]
        lines = [costs.Line(f"compute {p.name}", 0.0, "USD", "hour", f"{p.count} × {p.instance_type} on this "
                            "machine: no charge", "-") for p in spec.nodes]
        capacity_steps = []
    findings = guardrails.evaluate(resources, spec.stack_tags, budget_opt_out=spec.budget_opt_out,
                                   hard_stop=bool(spec.budget and spec.budget.hard_stop),
                                   monthly_limit=spec.budget.monthly_limit if spec.budget else None,
                                   currency=spec.budget.currency if spec.budget else None,
                                   ttl_hours=spec.lifecycle.ttl_hours, idle_minutes=spec.lifecycle.idle_minutes)
    findings += spec_findings(spec, pools, lines)
    findings += budget_findings(spec, pools) + cost_findings(spec, lines, allow_over_budget, capacity_steps)
    if strict:
        findings += cloud.readiness(resources, spec.stack_tags)
    findings += scheduler_findings(spec)
    destroy_steps = cloud.destroy_steps(spec, outputs)
    findings += head_history_findings(spec)
    if cloud.uses_pulumi:
        destroy_steps = headhistory.destroy_steps(spec) + destroy_steps
    checked, cold = compat.check_stack(spec), None
    if checked:
        lock = image_lock.load(spec.image.lock)
        findings += compat_findings(checked) + image_findings(spec, lock, outputs)
        cold = coldstart.model(spec.cloud, *image_bytes(lock, outputs.get("imageRef")),
                               parallel_fs=spec.storage.parallel_fs.enabled,
                               host_layer=host_layer_at_boot([c.layer for c in checked if c.layer]))
    nodes = cloud.node_updates
    changes = updates.node_changes(prior, resources, nodes) if prior and nodes else []
    pinning = updates.pinning_note(resources, nodes) if nodes else ""
    notes = [n for n in [prior_note, updates.summarize(changes) if changes else pinning] if n]
    return Plan(stack, spec, resources, outputs, pools, findings, checked, cold,
                destroy_steps, changes, notes, lines, capacity_steps)


def pool_fabrics(spec: ClusterSpec) -> list[tuple[str, catalog.FabricRate]]:
    """(pool, its type's fabric rate) for each pool on a type with an RDMA fabric that the pool does not turn off:
    the ports × rate NCCL uses between nodes (catalog fabric_rates.csv), the Ethernet front-end NIC apart."""
    found = []
    for pool in spec.nodes:
        try:
            it = catalog.instance_type(spec.cloud, pool.instance_type)
        except KeyError:
            continue
        rate = catalog.fabric_rate(spec.cloud, it.name) if it.has_rdma and pool.rdma is not False else None
        if rate is not None:
            found.append((pool.name, rate))
    return found


def physical_name(resource: PlannedResource) -> str:
    """The name a store has in the cloud (bucket, repository, volume), else the resource's own name."""
    for key in ("bucket", "name"):
        value = resource.props.get(key)
        if isinstance(value, str) and value:
            return value
    return resource.name


def compat_findings(checked: list[compat.PoolCompat]) -> list[Finding]:
    """Each conflict between the lock and a pool, naming the pool, its host image, the pins and the rule."""
    return [
        Finding(f"compat:{c.rule}", Severity.ERROR if c.severity == compat.ERROR else Severity.WARNING, "",
                f"{pool.pool_key} ({pool.instance_type}, {pool.host.label}) with lock {pool.lock}: {c.message}")
        for pool in checked for c in pool.conflicts
    ]


def host_layer_line(layer: hostlayer.HostLayer) -> str:
    """One pool's host layer for the plan: baked, or what the first boot installs, and what the image gives."""
    head = f"host layer ({layer.host_lock or 'no host lock'}, {layer.family or 'OS family unknown'})"
    installed = list(dict.fromkeys(f"{p.component} {p.version}" for p in layer.provided
                                   if p.by == hostlayer.INSTALL))
    if layer.baked:
        body = f"baked image {layer.baked}"
    elif installed:
        body = f"first boot installs {', '.join(installed)}"
    else:
        body = "nothing to install"
    given = [f"{p.need} from the image{f' {p.version}' if p.version else ''}" for p in layer.provided
             if p.by == hostlayer.IMAGE]
    missing = [f"{p.need} ({p.why})" for p in layer.missing]
    return (f"{head}: {body}" + (f" ({'; '.join(given)})" if given else "")
            + (f"; missing, so up refuses: {'; '.join(missing)}" if missing else ""))


def host_layer_json(layer: hostlayer.HostLayer) -> dict[str, Any]:
    return {"hostLock": layer.host_lock, "os": layer.family, "base": layer.base, "baked": layer.baked,
            "installsAtFirstBoot": layer.installs, "digest": layer.digest if layer.install else None,
            "byNeed": {p.need: {"by": p.by, "component": p.component, "version": p.version, "why": p.why}
                       for p in layer.provided}}


def host_layer_at_boot(layers: list[hostlayer.HostLayer]) -> str | None:
    """For the cold-start model: `install` when any pool installs its host layer at first boot, `baked` when every
    pool with something to install boots a baked image, None when no pool has anything to install."""
    if any(layer.installs for layer in layers):
        return coldstart.INSTALL
    return coldstart.BAKED if any(layer.baked for layer in layers) else None


def scheduler_findings(spec: ClusterSpec) -> list[Finding]:
    """The stack's scheduler against its lock (compat.check_scheduler): one finding for the stack, on every cloud."""
    return [Finding(f"compat:{c.rule}", Severity.ERROR if c.severity == compat.ERROR else Severity.WARNING, "",
                    c.message) for c in compat.scheduler_conflicts(spec)]


def head_history_findings(spec: ClusterSpec) -> list[Finding]:
    """What a replaced head, destroy and the next up do to the queue and the accounting history (headhistory): the
    same rule on every cloud whose head boots from user data."""
    note = headhistory.plan_note(spec)
    return [Finding("plan-note", Severity.WARNING, "", note)] if note else []


UNPUBLISHED = "image-unpublished"


def image_findings(spec: ClusterSpec, lock: image_lock.Lock, outputs: dict[str, Any]) -> list[Finding]:
    """Nodes pull the golden image by digest: say when there is none yet (up refuses that)."""
    if outputs.get("imageRef"):
        return []
    return [Finding(UNPUBLISHED, Severity.WARNING, "",
                    f"no pushed image of lock {lock.name} ({lock.content_hash}) for this stack: nodes would boot "
                    f"without the golden image, so up refuses; goldenenv image build {lock.name} && goldenenv image "
                    f"push {lock.name} -s {spec.stack} (or set image.ref to repo@sha256:...)")]


def image_bytes(lock: image_lock.Lock, ref: str | None) -> tuple[int | None, str]:
    """Compressed bytes a node pulls: from the push record; else the local image's size as an upper bound."""
    pushed = next((p for p in publish.records(lock.name) if ref and p.ref == ref and p.compressed_bytes), None)
    if pushed:
        return pushed.compressed_bytes, "compressed, as pushed"
    try:
        import docker

        size = docker.from_env(timeout=3).images.get(lock.tag).attrs["Size"]
        return int(size), "uncompressed, local build (an upper bound)"
    except Exception:  # noqa: BLE001 - no engine or no build: the model says the pull is not counted
        return None, f"{lock.tag} is neither pushed with a size nor built here"


def offline_context(spec: ClusterSpec) -> clouds.BuildContext:
    """The context of an offline plan: the cloud's offline lookups (nothing known to exist), no node rolled."""
    return clouds.BuildContext(lookup=clouds.get(spec.cloud).offline_lookup(spec))


def run_program(stack: str, config: dict[str, Any], context: clouds.BuildContext | None = None,
                prior: Any = None) -> tuple[list[PlannedResource], dict[str, Any]]:
    """Run goldenenv.program.build() against a recording mock monitor; by default with the cloud's offline
    lookups (nothing exists), never the live ones."""
    from goldenenv import program

    if context is None:
        try:
            context = offline_context(stackconfig.load(stack, *stackconfig.namespaced(config)))
        except Exception:  # noqa: BLE001 - a config the program itself will refuse: it needs no lookups
            context = clouds.BuildContext()

    pulumi.runtime.set_all_config(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items() if v is not None}
    )
    return record(lambda: program.build(context), _cloud_of(config), stack, prior)


def record(build: Any, cloud: Any, stack: str = "test",
           prior: Any = None) -> tuple[list[PlannedResource], dict[str, Any]]:
    """Run `build` (a Pulumi program returning its outputs) against the recording mock monitor, with `cloud`'s plan
    mocks: the resources it declares and its outputs, as an offline plan sees them."""
    monitor = _RecordingMonitor(_PlanMocks(prior, cloud))
    pulumi_mocks.set_mocks(monitor.mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    outputs: dict[str, Any] = {}

    def run() -> None:
        declared = {k: v for k, v in build().items() if v is not None}
        outputs.update(_sync_await(pulumi.Output.from_input(declared).future()) or {})

    _sync_await(run_pulumi_func(run))
    return monitor.records, outputs


def _cloud_of(config: dict[str, Any]) -> Any:
    """The cloud a stack's config names, for its mocks; None when it names none goldenenv knows."""
    name = config.get("goldenenv:cloud")
    return clouds.get(name) if isinstance(name, str) and name in clouds.names() else None


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, also keeping what a plan shows: parent, options, inputs."""

    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.records: list[PlannedResource] = []

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.records.append(PlannedResource(
                urn=response.urn,
                type=request.type,
                name=request.name,
                props=rpc.deserialize_properties(request.object),
                id=response.id or None,
                parent_urn=None if _is_stack(request.parent) else request.parent,
                custom=request.custom,
                retain_on_delete=request.retainOnDelete if request.HasField("retainOnDelete") else False,
                protect=request.protect if request.HasField("protect") else False,
                outputs=rpc.deserialize_properties(response.object) if response.object else {},
                ignore_changes=tuple(request.ignoreChanges),
                delete_before_replace=bool(request.deleteBeforeReplace),
                delete_hooks=tuple(request.hooks.before_delete) if request.HasField("hooks") else (),
                import_id=request.importId or None,
            ))
        return response


    def RegisterResourceOutputs(self, request):  # noqa: N802 (gRPC method name)
        """A component's register_outputs: the checkpoint keeps them (a node pool's boot scripts), so the plan
        records them as the component's outputs."""
        registered = rpc.deserialize_properties(request.outputs) if request.HasField("outputs") else {}
        for i, record in enumerate(self.records):
            if record.urn == request.urn and not record.custom:
                self.records[i] = replace(record, outputs=registered)
        return super().RegisterResourceOutputs(request)


def _is_stack(urn: str) -> bool:
    return not urn or urn.split("::")[2].split("$")[-1] == "pulumi:pulumi:Stack"


class _PlanMocks(pulumi.runtime.Mocks):
    """Stand-ins for what only the cloud knows; marked so nobody takes them for real."""

    def __init__(self, prior: Any = None, cloud: Any = None) -> None:
        self.cloud = cloud
        """The stack's cloud: its plan_mock and plan_call answer for what only the cloud knows."""
        self.prior = prior
        """The stack's last deployment (updates.Deployment) or None: helps the mocks answer as the cloud would."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        resource_id, state = self._created(args)
        before = self.prior.get(args.typ, args.name) if self.prior is not None else None
        if before is None:
            return resource_id, state
        # an update, as the cloud answers it: same id, computed values (addresses, names, DNS) as deployed,
        # the program's inputs as given now
        state = {**state, **{k: v for k, v in before.outputs.items() if k not in args.inputs}, **args.inputs}
        nodes = self.cloud.node_updates if self.cloud is not None else None
        template = nodes.template if nodes else None
        if template is not None and args.typ == template.type:
            # the cloud adds a template version when the template's inputs change
            from goldenenv import updates

            version = int(before.outputs.get(template.version_output) or 1)
            state[template.version_output] = version + (1 if updates.input_changes(before.inputs, args.inputs) else 0)
        return before.id or resource_id, state

    def _created(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        """A new resource: the program's inputs, and what the cloud computes (ids, addresses) from its mock."""
        state = dict(args.inputs)
        answer = self.cloud.plan_mock(args) if self.cloud is not None else None
        resource_id, computed = answer if answer is not None else (None, {})
        state.update(computed)
        state.setdefault("name", args.name)
        return resource_id or f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        return (self.cloud.plan_call(args) if self.cloud is not None else None) or {}


def fallback_price_notes(spec: ClusterSpec) -> list[str]:
    """What each capacity type a pool may fall back to costs an hour: the plan prices the one in use; the cost gate
    (cost_findings) judges the dearest one `up` may take."""
    notes = []
    for pool in spec.nodes:
        if len(pool.capacities) < 2:
            continue
        prices = []
        for capacity in pool.capacities:
            line = costs.run_cost(spec.cloud, pool.instance_type, spec.region, capacity.value, pool.count, 1.0)
            shown = "not priced" if line.amount is None else money(line.amount, line.currency, 2) + "/h"
            prices.append(f"{capacity.value} {shown}")
        notes.append(f"{pool.name}: {pool.count} × {pool.instance_type} cost {', '.join(prices)}; the plan prices "
                     f"{pool.capacity.value}, the one in use, and the budget gate judges the dearest of them, since "
                     "up may fall back to it")
    return notes


def costs_currency(pool_costs: list[PoolCost], cloud: str | None = None) -> str:
    """The currency the stack's catalog prices are in (one per cloud); when no pool is priced, the cloud's catalog
    currency (USD without a cloud)."""
    found = {c.price.currency for c in pool_costs if c.price}
    if len(found) == 1:
        return found.pop()
    return costs._currency(cloud) if cloud else "USD"


def money(amount: float, currency: str, digits: int = 0) -> str:
    """$1,234 for USD, 1,234 CNY for any other currency."""
    text = f"{amount:,.{digits}f}"
    return f"${text}" if currency == "USD" else f"{text} {currency}"


def pool_costs(spec: ClusterSpec) -> list[PoolCost]:
    """Each pool's compute per hour: the spot snapshot for spot pools where the catalog has one (costs.compute_price)."""
    found = []
    for pool in spec.nodes:
        if pool.capacity is Capacity.CAPACITY_BLOCK:  # prepaid at purchase (costs.CAPACITY_BLOCK_BILLING)
            found.append(PoolCost(pool.name, pool.instance_type, pool.count, pool.capacity.value, 0.0, None))
            continue
        if pool.price_per_hour is not None:  # the user's own price (nodes.pricePerHour)
            found.append(PoolCost(pool.name, pool.instance_type, pool.count, pool.capacity.value,
                                  pool.price_per_hour * pool.count, None))
            continue
        price = costs.compute_price(spec.cloud, pool.instance_type, spec.region, pool.capacity.value)
        found.append(PoolCost(
            pool.name, pool.instance_type, pool.count, pool.capacity.value,
            price.usd_per_hour * pool.count if price else None, price,
        ))
    return found


def spec_findings(spec: ClusterSpec, costs: list[PoolCost], lines: list[costs.Line] = ()) -> list[Finding]:
    """What a user should know before renting: price caveats (regions, unverified figures, spot snapshots, lines
    not counted), what the hard stop and the time to live do to each pool, and the account step the budget needs."""
    notes = []
    for c in costs:
        if c.price is None:
            if c.usd_per_hour is None:
                notes.append(f"no catalog price for {c.instance_type} in {spec.region}: cost not counted")
            continue
        if c.capacity == "spot" and c.price.capacity == "spot":
            notes.append(f"{c.pool}: priced at the catalog's spot snapshot of {c.price.as_of}"
                         + ("" if c.price.verified else " (unverified)")
                         + "; spot prices move by the hour and never pass the on-demand price")
        elif c.capacity == "spot":
            notes.append(f"{c.pool}: no spot snapshot in the catalog; the on-demand price is shown as its ceiling")
        elif not c.price.verified:
            notes.append(f"{c.instance_type} price is unverified in the catalog ({c.price.as_of})")
    unpriced = [line.name for line in lines if line.amount is None and line.kind != "compute"]
    if unpriced:
        notes.append(f"not counted (no catalog price): {', '.join(unpriced)}")
    unverified = [line.name for line in lines if line.amount and not line.verified and line.kind not in
                  ("compute", "idle")]
    if unverified:
        notes.append(f"unverified catalog prices in: {', '.join(unverified)}")
    cloud = clouds.get(spec.cloud)
    notes += cloud.plan_notes(spec, costs)
    order = failover.stack_order(spec) if cloud.uses_pulumi else []
    if len(order) > 1:
        notes.append("capacity: up tries, in order, until the cloud has room (goldenenv:zones, capacityFallback; "
                     "the zone only while the cluster does not exist yet; a quota or a fatal error stops it, and the "
                     "place that worked is written into the stack file): " + "; ".join(failover.describe_order(order)))
        notes += fallback_price_notes(spec)
    return [Finding("plan-note", Severity.WARNING, "", n) for n in notes]


OVER_BUDGET = "cost:over-budget"
UNPRICED = "cost:unpriced"
BELOW_ONE_HOUR = "cost:budget-below-one-hour"
RUNWAY = "cost:runway"
RUN_COST = "cost:run"
CURRENCY = "cost:currency"
OVER_BUDGET_RULES = (OVER_BUDGET, BELOW_ONE_HOUR, UNPRICED)
"""The gate's refusals that --allow-over-budget turns into warnings: `up` says them as it goes ahead."""


def cost_findings(spec: ClusterSpec, lines: list[costs.Line], allow_over_budget: bool = False,
                  steps: list[costgate.Step] | None = None) -> list[Finding]:
    """The cost gate, over everything `up` may deploy: `steps` (costgate.steps) are the capacity types of the
    stack's failover order, each priced; the dearest decides, and the message names it when it is not the stack
    file's own. With a `goldenenv:run`, its projected cost against the monthly budget: an error over budget. Without
    one, an error when the budget cannot pay one hour at full use, else the runway. A compute line with no price in
    the stack's region is an error (cost:unpriced) naming the type and the region. --allow-over-budget turns each
    error into a warning that says what is over. Stacks with no priced line (local) or no budget are not judged
    here."""
    if spec.budget is None:
        return []
    steps = steps or [costgate.Step(tuple((p.name, p.capacity.value) for p in spec.nodes), (spec.placed_zone or "",),
                                    tuple(lines), True)]
    unpriced = list(dict.fromkeys(t for step in steps for t in _unpriced_compute(spec, list(step.lines))))
    if unpriced:
        ahead = " (--allow-over-budget: going ahead)" if allow_over_budget else ""
        return [Finding(UNPRICED, Severity.WARNING if allow_over_budget else Severity.ERROR, "",
                        f"cannot judge the cost of {', '.join(unpriced)} in {spec.region}: the catalog has no price "
                        f"for it in that region (another region's price is not this one's); give its price as "
                        f"goldenenv:nodes.pricePerHour (per node-hour, in {spec.budget.currency})"
                        + (", choose a goldenenv:head.instanceType the catalog prices there" if any(
                            t.startswith("the head's") for t in unpriced) else "")
                        + f" or pass --allow-over-budget{ahead}")]
    dearest = max(steps, key=lambda step: (_judged(spec, list(step.lines)), step.first))
    found = _judge(spec, list(dearest.lines), allow_over_budget, dearest, steps)
    return found


def _judged(spec: ClusterSpec, lines: list[costs.Line]) -> float:
    """What the gate compares with the monthly budget: the run's cost with a `goldenenv:run`, else one hour."""
    if spec.run is not None:
        return costs.total(costs.run_lines(spec, lines), "run")
    return costs.total(lines, "hour")


def _over(spec: ClusterSpec, lines: list[costs.Line]) -> bool:
    return round(_judged(spec, lines), 2) > round(spec.budget.monthly_limit, 2)


def _judge(spec: ClusterSpec, lines: list[costs.Line], allow_over_budget: bool, step: costgate.Step,
           steps: list[costgate.Step]) -> list[Finding]:
    """The verdict on the dearest step's lines; `where` says which step it is when it is not the stack file's."""
    hourly = costs.total(lines, "hour")
    if hourly <= 0:
        return []
    budget = spec.budget
    currency = next((line.currency for line in lines if line.amount), budget.currency)
    if currency != budget.currency:
        return [Finding(CURRENCY, Severity.WARNING, "",
                        f"the budget is in {budget.currency} and the catalog prices this stack in {currency}: "
                        "the cost gate cannot compare them; set budget.currency: " + currency)]
    per = "" if spec.run else "/hour"
    where, drop, listed = "", "", ""
    if not step.first:
        own = next(s for s in steps if s.first)
        mine = ", ".join(f"{pool} on {capacity}" for pool, capacity in own.capacity)
        where = (f"up may fall back to {step.said(spec)}, the dearest place in its order ({mine}, as the stack "
                 f"file says, costs {money(_judged(spec, list(own.lines)), currency, 2)}{per}); there ")
        drop = ", drop the fallback from goldenenv:nodes.capacityFallback"
    over_steps = [s for s in steps if _over(spec, list(s.lines))]
    if len(steps) > 1 and over_steps:
        listed = ". Over the budget in up's order: " + "; ".join(
            f"{s.said(spec)} ({money(_judged(spec, list(s.lines)), currency, 2)}{per})" for s in over_steps)
    limit = money(budget.monthly_limit, currency, 2)
    over = Severity.WARNING if allow_over_budget else Severity.ERROR
    going_ahead = " (--allow-over-budget: going ahead)" if allow_over_budget else ""
    then = _then(spec)
    if spec.run is not None:
        run = costs.total(costs.run_lines(spec, lines), "run")
        run_hours = spec.run.hours + spec.run.idle_hours
        how = (f"goldenenv:run.hours {spec.run.hours:g} h"
               + (f" + idleHours {spec.run.idle_hours:g} h" if spec.run.idle_hours else "")
               + f" at {money(hourly, currency, 2)}/hour, plus a month of the bucket")
        if round(run, 2) > round(budget.monthly_limit, 2):
            return [Finding(OVER_BUDGET, over, "",
                            f"{where}the run costs {money(run, currency, 2)} ({how}), over the monthly budget of "
                            f"{limit} by {money(run - budget.monthly_limit, currency, 2)}: raise "
                            f"goldenenv:budget.monthlyLimit, shorten goldenenv:run.hours{drop}, or pass "
                            f"--allow-over-budget{going_ahead}; then {then}{listed}")]
        days = budget.monthly_limit / hourly / 24
        return [Finding(RUN_COST, Severity.WARNING, "",
                        f"{where}the run costs {money(run, currency, 2)} ({how}), "
                        f"{100 * run / budget.monthly_limit:.0f} % of the monthly budget of {limit}; the budget "
                        f"lasts {days:.1f} days at full use ({run_hours:g} h planned), then {then}")]
    if hourly > budget.monthly_limit:
        return [Finding(BELOW_ONE_HOUR, over, "",
                        f"{where}the budget of {limit}/month cannot pay one hour of this stack at full use "
                        f"({money(hourly, currency, 2)}/hour): raise goldenenv:budget.monthlyLimit, shrink the "
                        f"stack{drop}, or pass --allow-over-budget{going_ahead}; then {then}{listed}")]
    hours = budget.monthly_limit / hourly
    month = (f"running all month costs {money(hourly * HOURS_PER_MONTH, currency)}; " if hours < HOURS_PER_MONTH
             else "the budget covers a whole month at full use; ")
    return [Finding(RUNWAY, Severity.WARNING, "",
                    f"{where}{month}the budget lasts {hours / 24:.1f} days ({hours:,.0f} h) at full use "
                    f"({money(hourly, currency, 2)}/hour), then {then}; a goldenenv:run section (hours) judges a "
                    "run against it")]


def _unpriced_compute(spec: ClusterSpec, lines: list[costs.Line]) -> list[str]:
    """The instance types whose compute line has no price: the budget cannot be judged without them."""
    missing = {line.name for line in lines if line.kind == "compute" and line.amount is None}
    found = [pool.instance_type for pool in spec.nodes if f"compute {pool.name}" in missing]
    if costs.HEAD_LINE in missing:
        head = head_shape(spec, clouds.get(spec.cloud))
        found.append(f"the head's {head.instance_type if head else 'instance type'}")
    return list(dict.fromkeys(found))


def _then(spec: ClusterSpec) -> str:
    """What happens when the budget is spent."""
    spot = any(pool.capacity.value == "spot" for pool in spec.nodes)
    if spec.budget and spec.budget.hard_stop:
        return "the hard stop stops the nodes" + (" (and terminates the one-time spot ones)" if spot else "")
    return "alerts fire but nothing stops"


NO_BUDGET = "no-budget"


def budget_findings(spec: ClusterSpec, costs: list[PoolCost]) -> list[Finding]:
    """A stack that rents priced machines has a budget, or says `budget: none` and hears that nothing watches.

    A cloud stack is one whose cloud can bill (it offers budgets) or whose pools the catalog prices; the local
    stack is neither.
    """
    billed = clouds.get(spec.cloud).capabilities
    priced = [c for c in costs if c.usd_per_hour]
    if spec.budget is not None or (clouds.Capability.BUDGET not in billed and not priced):
        return []
    monthly = sum(c.usd_per_hour for c in priced) * HOURS_PER_MONTH
    cost = f"{money(monthly, costs_currency(costs, spec.cloud))}/month at full use" if priced else "an unpriced amount"
    if spec.budget_opt_out:
        return [Finding(NO_BUDGET, Severity.WARNING, "",
                        f"budget: none - no alert and no stop watches this stack's spending ({cost}); "
                        f"only lifecycle.ttlHours / idleMinutes or destroy end it")]
    return [Finding(NO_BUDGET, Severity.ERROR, "",
                    f"goldenenv:budget is not set on a {spec.cloud} stack ({cost}); set budget (monthlyLimit, "
                    f"emails) or write `goldenenv:budget: none` to run without one on purpose")]

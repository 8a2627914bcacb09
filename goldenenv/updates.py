"""What an `up` does to running nodes: the stack's last deployment, the plan's node changes, rolling nodes.

Cloud-neutral: each cloud says through the Cloud protocol (`Cloud.node_updates`, clouds/base.py NodeUpdates) which
resources are its GPU nodes, the template they pin if any (AWS: a launch template version, ignoring template
changes, so a new boot script or tag never replaces a node behind the user's back), else the boot script they
carry and hold until rolled (Alibaba: user data), which inputs its provider cannot change in place and which it
changes by restarting the node. This module makes that visible and usable: `Deployment` is the stack's last
deployment (from a Pulumi file backend's checkpoint, or from a plan), `node_changes` says per node whether an `up`
creates, keeps, updates or replaces it and why, `stale_nodes` lists the nodes behind their template or boot
script, and `roll` replaces them one `up` at a time.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goldenenv.clouds.base import ROLL_NODES_ENV, NodeScript, NodeTemplate, NodeUpdates, cloud_of, script_digest
from goldenenv.clouds.base import node_updates as cloud_node_updates
from goldenenv.guardrails import PlannedResource
from goldenenv.scopedenv import scoped_env

SECRET_SIG = "4dabf18193072939515e22adb298388d"
"""The key Pulumi marks a secret value with in state files."""


@dataclass(frozen=True)
class DeployedResource:
    urn: str
    type: str
    name: str
    id: str | None
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]


@dataclass(frozen=True)
class Deployment:
    """A stack's last deployment: its resources keyed by (type token, name), and its cloud where known."""

    stack: str
    resources: Mapping[tuple[str, str], DeployedResource]
    """Its custom resources (the cloud's)."""
    cloud: str | None = None
    """The cloud that built it (its node update facts say what an up does to the nodes); None: unknown."""
    components: Mapping[tuple[str, str], DeployedResource] = field(default_factory=dict)
    """Its components (goldenenv's), with the outputs they registered (the boot scripts a node pool wants now)."""

    def get(self, type_token: str, name: str) -> DeployedResource | None:
        return self.resources.get((type_token, name))

    def of_type(self, type_token: str) -> list[DeployedResource]:
        return [r for r in self.resources.values() if r.type == type_token]

    def components_of_type(self, type_token: str) -> list[DeployedResource]:
        return [r for r in self.components.values() if r.type == type_token]

    @classmethod
    def from_resources(cls, stack: str, resources: Iterable[DeployedResource], cloud: str | None = None,
                       components: Iterable[DeployedResource] = ()) -> Deployment:
        return cls(stack, {(r.type, r.name): r for r in resources}, cloud, {(r.type, r.name): r for r in components})

    @classmethod
    def from_plan(cls, plan: Any) -> Deployment:
        """What an `up` of this plan would leave in the state: its props as inputs, the mocks' answers as outputs.

        The props are the program's inputs as declared; the engine would keep an ignored input (a node's
        template reference or boot script) at its old value, which a plan made with a prior deployment does not show.
        """
        def deployed(r: PlannedResource) -> DeployedResource:
            return DeployedResource(r.urn, r.type, r.name, r.id, dict(r.props), dict(r.outputs))

        return cls.from_resources(plan.stack, (deployed(r) for r in plan.resources if r.custom), plan.spec.cloud,
                                  (deployed(r) for r in plan.resources if not r.custom))

    @classmethod
    def from_checkpoint(cls, path: Path) -> Deployment:
        """A stack checkpoint as the Pulumi CLI writes it under a file:// backend (JSON, or gzipped JSON); its
        cloud is the one its components (goldenenv:<cloud>:<Kind>) name."""
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        checkpoint = json.loads(raw).get("checkpoint") or {}
        latest = checkpoint.get("latest") or {}
        found = latest.get("resources") or []
        kept = [r for r in found if not r["type"].startswith("pulumi:pulumi:")]

        def deployed(r: Mapping[str, Any]) -> DeployedResource:
            return DeployedResource(r["urn"], r["type"], _urn_name(r["urn"]), r.get("id") or None,
                                    r.get("inputs") or {}, r.get("outputs") or {})

        stack = checkpoint.get("stack") or path.name.split(".json")[0]
        return cls.from_resources(stack.rsplit("/", 1)[-1], [deployed(r) for r in kept if r.get("custom", True)],
                                  cloud_of(r.get("type", "") for r in found),
                                  [deployed(r) for r in kept if not r.get("custom", True)])

    @classmethod
    def load(cls, stack: str, state_dir: Path) -> Deployment | None:
        """The stack's checkpoint in a file backend's folder; None when the stack was never deployed there.

        Reads `<state_dir>/.pulumi/stacks/<project>/<stack>.json` (project-scoped layout of current CLIs) or the
        older `<state_dir>/.pulumi/stacks/<stack>.json`.
        """
        stacks = Path(state_dir) / ".pulumi" / "stacks"
        for pattern in (f"*/{stack}.json", f"*/{stack}.json.gz", f"{stack}.json", f"{stack}.json.gz"):
            found = sorted(stacks.glob(pattern))
            if found:
                return cls.from_checkpoint(found[0])
        return None


def last_deployment(stack: str, state_dir: Path | None = None) -> tuple[Deployment | None, str]:
    """The stack's last deployment where goldenenv keeps it, and a line saying where that came from.

    goldenenv's automation keeps state in the project's local file backend (project.Project.state) unless PULUMI_BACKEND_URL
    names another backend; a file:// one is read too, any other (Pulumi Cloud, S3 ...) is not read offline.
    """
    backend = os.environ.get("PULUMI_BACKEND_URL", "")
    if state_dir is None and backend and not backend.startswith("file://"):
        return None, (f"the stack's state is on {backend} (PULUMI_BACKEND_URL), which plan does not read offline: "
                      "what an up replaces is not shown; `pulumi preview` shows it")
    if state_dir is None:
        if backend:
            state_dir = Path(backend.removeprefix("file://")).expanduser()
        else:
            from goldenenv import project

            state_dir = project.current().state
    deployment = Deployment.load(stack, state_dir)
    if deployment is None:
        return None, f"stack {stack} was never deployed from {state_dir}: an up creates every node"
    return deployment, f"compared with the last deployment of {stack} in {state_dir}"


@dataclass(frozen=True)
class NodeChange:
    node: str
    """pool-index, the name `--roll-nodes` takes."""
    pool: str
    action: str
    """create | keep | update | replace"""
    reason: str
    version: str | None = None
    """The template version the node runs after the up (None where nodes pin no template)."""
    template_version: str | None = None
    """The template's current version."""

    @property
    def erases_scratch(self) -> bool:
        return self.action == "replace"


def node_changes(prior: Deployment | None, resources: Sequence[PlannedResource],
                 nodes: NodeUpdates | None = None) -> list[NodeChange]:
    """Per planned node, what an `up` from the prior deployment does to it, and why.

    nodes: the cloud's node update facts (Cloud.node_updates); by default those of the cloud the prior deployment
    or the planned resources name."""
    facts = nodes or _facts(prior.cloud if prior else None, [r.type for r in resources])
    if facts is None:
        return []
    template, script = facts.template, facts.script
    ref_key = template.ref if template else None
    held_keys = {k for k in (ref_key, script.input if script else None) if k}
    templates = {r.id: r for r in resources if template and r.type == template.type and r.id}
    changes = []
    for r in resources:
        if not is_node(r, facts):
            continue
        node = node_name(r.urn, r.name)
        pool = node.rsplit("-", 1)[0]
        ref = _ref(r.props, template)
        current = _text(ref.get("version"))
        before = prior.get(r.type, r.name) if prior else None
        if before is None:
            on = f" on {template.word} version {current}" if template else ""
            changes.append(NodeChange(node, pool, "create", f"created{on}", current, current))
            continue
        pinned = _text((_ref(before.inputs, template) or _ref(before.outputs, template)).get("version"))
        ignored = set(r.ignore_changes)
        # held inputs (the template reference, the boot script) count even where ignored: plan says they moved
        differ = [k for k in input_changes(before.inputs, r.props) if k not in ignored or k in held_keys]
        others = [k for k in differ if k not in held_keys]
        moved = template is not None and ref_key in differ
        rolled = moved and ref_key not in ignored
        rescripted = script is not None and script.input in differ
        script_rolled = rescripted and script.input not in ignored
        fixed = sorted(facts.replacing.intersection(others))
        why = _template_news(prior, templates.get(ref.get("id")), pinned, current, facts) if moved else ""
        news = _script_news(before, r, script) if rescripted else ""
        if rolled or script_rolled or fixed:
            # a replacement keeps ignored inputs at their state value: a node replaced unrolled stays on its
            # template version, and boots the boot script it has
            if rolled:
                cause = f"onto {template.word} version {current} (was {pinned}; {why}) because it is rolled"
            elif script_rolled:
                cause = f"onto the new {script.word}{f' ({news})' if news else ''} because it is rolled"
            else:
                cause = f"because {facts.words(fixed)} cannot change in place"
                if rescripted:
                    cause += (f" (the new node boots the {script.word} this one has, not the planned one"
                              f"{f': {news}' if news else ''}; `goldenenv up --roll-nodes {node}` then replaces it)")
            order = ("deleted before its replacement is created" if r.delete_before_replace
                     else "deleted once its replacement is created")
            changes.append(NodeChange(
                node, pool, "replace",
                f"replaced {cause}: {order}, which erases {facts.erased}; keep checkpoints in the bucket or the "
                "parallel file system",
                current if rolled else pinned, current))
            continue
        held = []
        if template is not None:
            held.append((f"keeps {template.word} version {pinned} (the template is now version {current}: {why}): "
                         f"nodes ignore template changes, so it is not replaced; `goldenenv up --roll-nodes {node}` "
                         f"replaces it onto version {current}") if moved else f"on {template.word} version {pinned}")
        if rescripted:
            planned = f"a newer one is planned: {news}" if news else "a newer one is planned"
            held.append(f"keeps its {script.word} ({planned}): nodes ignore {script.word} changes, so it is neither "
                        f"restarted nor replaced; `goldenenv up --roll-nodes {node}` replaces it, and the new node "
                        f"runs the new {script.word}")
        if others:
            restarts = list(dict.fromkeys(facts.restarting[k] for k in others if k in facts.restarting))
            how = f": {'; '.join(restarts)}" if restarts else ""
            changes.append(NodeChange(node, pool, "update",
                                      "; ".join([f"updated in place ({facts.words(others)}){how}", *held]),
                                      pinned, current))
        elif moved or rescripted:
            changes.append(NodeChange(node, pool, "keep", "; ".join(held), pinned, current))
        elif template is not None:
            changes.append(NodeChange(node, pool, "keep", f"unchanged, {held[0]}", pinned, current))
        else:
            changes.append(NodeChange(node, pool, "keep", "unchanged"))
    return sorted(changes, key=lambda c: _node_order(c.node))


def pinning_note(resources: Sequence[PlannedResource], nodes: NodeUpdates | None = None) -> str:
    """For a plan without a prior deployment: how later changes (a template's, or the nodes' own) reach the nodes."""
    facts = nodes or _facts(None, [r.type for r in resources])
    if facts is None or not any(is_node(r, facts) for r in resources):
        return ""
    if facts.template is None:
        return facts.note
    versions = sorted({_text(_ref(r.props, facts.template).get("version"))
                       for r in resources if is_node(r, facts)} - {None})
    if not versions:
        return ""
    return f"nodes pin {facts.template.word} version {', '.join(versions)}: {facts.note}"


def summarize(changes: Sequence[NodeChange]) -> str:
    counts = {a: sum(c.action == a for c in changes) for a in ("create", "keep", "update", "replace")}
    return ", ".join(f"{n} to {a}" for a, n in counts.items() if n) or "no nodes"


def stale_nodes(deployment: Deployment, nodes: NodeUpdates | None = None) -> list[str]:
    """Nodes behind what their pool declares: what `up --roll-nodes` replaces of the nodes named.

    With a template: a node whose pinned version is not its template's latest; one still on a symbolic version
    ($Default, from before nodes pinned one) counts too: rolling pins it. With a boot script the nodes carry: a node
    whose script (kept in its state while ignored) is not the one its pool records the program gives it now. A
    deployment made before pools recorded that shows no node behind its script."""
    facts = nodes or _facts(deployment.cloud, [r.type for r in deployment.resources.values()])
    if facts is None:
        return []
    nodes_found = [r for t in facts.node_types for r in deployment.of_type(t) if is_node(r, facts)]
    stale = set()
    template = facts.template
    if template is not None:
        templates = {r.id: r for r in deployment.of_type(template.type) if r.id}
        for r in nodes_found:
            ref = _ref(r.inputs, template) or _ref(r.outputs, template)
            found = templates.get(ref.get("id"))
            if found is None:
                continue
            pinned = _text(ref.get("version"))
            if pinned in template.symbolic_versions or pinned != _text(found.outputs.get(template.version_output)):
                stale.add(node_name(r.urn, r.name))
    if facts.script is not None:
        wanted = _wanted_scripts(deployment, facts.script)
        for r in nodes_found:
            want, have = wanted.get(r.name), script_digest(_plain(r.inputs.get(facts.script.input)))
            if want and have and want != have:
                stale.add(node_name(r.urn, r.name))
    return sorted(stale, key=_node_order)


def roll(target: Any, nodes: Sequence[str], log: Callable[[str], None] = print,
         one_at_a_time: bool = True) -> list[str]:
    """Replace these nodes onto their pool's current template or boot script: one `up` per node (the others keep
    running), or all in one `up`. `target` is an Automation API stack (`up(on_output=)`, `workspace.env_vars`); the roll
    variable is set for each `up` and restored after. Returns the nodes rolled."""
    env = target.workspace.env_vars
    batches = [[n] for n in nodes] if one_at_a_time else ([list(nodes)] if nodes else [])
    if not batches:
        log("no node to roll: no node named is behind its pool's template or boot script")
        return []
    rolled: list[str] = []
    for step, batch in enumerate(batches, 1):
        names = ", ".join(batch)
        log(f"rolling {names} ({step}/{len(batches)}): replaced onto its pool's current template or boot "
            "script, which erases its local disks (NVMe scratch, root or system disk)")
        with scoped_env(env, ROLL_NODES_ENV, ",".join(batch)):
            target.up(on_output=log)
        rolled += batch
        log(f"rolled {names}")
    return rolled


def input_changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Top-level inputs that differ between a recorded state and the program's inputs.

    State files carry engine bookkeeping (`__defaults`, secret envelopes); inputs a provider filled in by default
    (named in `__defaults`) are not counted as removed.
    """
    old, new = _plain(before) or {}, _plain(now) or {}
    defaulted = set(before.get("__defaults") or ())
    return sorted(k for k in old.keys() | new.keys()
                  if old.get(k) != new.get(k) and not (k not in new and k in defaulted))


def is_node(resource: Any, facts: NodeUpdates) -> bool:
    """A GPU node of a pool: one of the cloud's node types named <stack>-<pool>-<index>. The Slurm head, an instance
    of the same type named <stack>-head, is not: it pins no pool template and is rolled by name (`head`)."""
    return resource.type in facts.node_types and bool(re.fullmatch(r".+-\d+", node_name(resource.urn, resource.name)))


def node_name(urn: str, name: str) -> str:
    """The node's name as goldenenv speaks of it (pool-index): its resource name less the stack prefix."""
    stack = urn.split("::", 1)[0].removeprefix("urn:pulumi:")
    return name.removeprefix(f"{stack}-")


def _node_order(node: str) -> tuple[str, int, str]:
    """gpu-2 before gpu-10: resources register in no fixed order."""
    pool, _, index = node.rpartition("-")
    return (pool, int(index), node) if index.isdigit() else (node, -1, node)


def _facts(cloud: str | None, types: Iterable[str]) -> NodeUpdates | None:
    """The node update facts of the named cloud, else of the cloud the type tokens name (clouds.base.cloud_of)."""
    return cloud_node_updates(cloud or cloud_of(types))


def _ref(values: Mapping[str, Any], template: NodeTemplate | None) -> dict[str, Any]:
    """The template reference (`{id, version}`) among a node's inputs or outputs; {} without a template."""
    if template is None:
        return {}
    found = _plain(values.get(template.ref))
    return found if isinstance(found, dict) else {}


def _template_news(prior: Deployment | None, template: PlannedResource | None, pinned: str | None,
                   current: str | None, facts: NodeUpdates) -> str:
    """Why a node's template moved: which of the template's inputs changed since the last deployment."""
    before = prior.get(template.type, template.name) if prior and template else None
    differ = input_changes(before.inputs, template.props) if before else []
    if differ:
        return "changed " + facts.words(differ)
    if facts.template and pinned in facts.template.symbolic_versions:
        return f"the node was created on {pinned}, before nodes pinned a version"
    return f"the template moved to version {current} in an earlier up that did not roll this node"


def _script_news(before: DeployedResource, planned: PlannedResource, script: NodeScript) -> str:
    """What differs between a node's deployed boot script and its planned one, in words ("" when unknown)."""
    deployed, now = _plain(before.inputs.get(script.input)), _plain(planned.props.get(script.input))
    return script.news(deployed, now) if script.news else ""


def _wanted_scripts(deployment: Deployment, script: NodeScript) -> dict[str, str]:
    """Node resource name -> digest of the boot script the program gave it in the last deployment."""
    wanted: dict[str, str] = {}
    for pool in deployment.components_of_type(script.wanted_type):
        found = _plain(pool.outputs.get(script.wanted_output))
        if isinstance(found, Mapping):
            wanted.update({str(k): v for k, v in found.items() if isinstance(v, str)})
    return wanted


def _plain(value: Any) -> Any:
    """A state value without engine bookkeeping: `__`-keys dropped, secrets unwrapped where stored in plain."""
    if isinstance(value, Mapping):
        if SECRET_SIG in value:
            return _plain(json.loads(value["plaintext"])) if "plaintext" in value else value
        return {k: _plain(v) for k, v in value.items() if not str(k).startswith("__")}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]

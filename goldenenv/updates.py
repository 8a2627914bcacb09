"""What an `up` does to running nodes: the stack's last deployment, the plan's node changes, rolling nodes.

GPU nodes pin a concrete launch template version and ignore template changes (clouds/aws/nodes.py), so a new
boot script or tag never replaces a node behind the user's back. This module makes that visible and usable:
`Deployment` is the stack's last deployment (from a Pulumi file backend's checkpoint, or from a plan),
`node_changes` says per node whether an `up` creates, keeps, updates or replaces it and why, `stale_nodes` lists
the nodes behind their template, and `roll` replaces them one `up` at a time.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goldenenv.clouds.aws.guardrail_facts import INSTANCE, LAUNCH_TEMPLATE
from goldenenv.clouds.base import ROLL_NODES_ENV
from goldenenv.guardrails import PlannedResource

TEMPLATE_REF = "launchTemplate"
"""The node input naming its launch template and version."""
TEMPLATE_VERSION = "latestVersion"
"""The launch template output a node pins (update_default_version makes it the default too)."""
SYMBOLIC_VERSIONS = ("$Default", "$Latest")
REPLACING_INPUTS = frozenset({"ami", "availabilityZone", "subnetId", "placementGroup", "privateIp", "keyName",
                              "tenancy"})
"""Node inputs EC2 cannot change on a running instance (ForceNew in terraform-provider-aws)."""
INPUT_MEANING = {"userData": "userData (boot script)", "imageId": "imageId (host AMI)",
                 "tagSpecifications": "tagSpecifications (launch tags)"}
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
    """A stack's last deployment: its resources keyed by (type token, name)."""

    stack: str
    resources: Mapping[tuple[str, str], DeployedResource]

    def get(self, type_token: str, name: str) -> DeployedResource | None:
        return self.resources.get((type_token, name))

    def of_type(self, type_token: str) -> list[DeployedResource]:
        return [r for r in self.resources.values() if r.type == type_token]

    @classmethod
    def from_resources(cls, stack: str, resources: Iterable[DeployedResource]) -> Deployment:
        return cls(stack, {(r.type, r.name): r for r in resources})

    @classmethod
    def from_plan(cls, plan: Any) -> Deployment:
        """What an `up` of this plan would leave in the state: its props as inputs, the mocks' answers as outputs.

        The props are the program's inputs as declared; the engine would keep an ignored input (a node's
        launchTemplate) at its old value, which a plan made with a prior deployment does not show.
        """
        return cls.from_resources(plan.stack, (
            DeployedResource(r.urn, r.type, r.name, r.id, dict(r.props), dict(r.outputs))
            for r in plan.resources if r.custom
        ))

    @classmethod
    def from_checkpoint(cls, path: Path) -> Deployment:
        """A stack checkpoint as the Pulumi CLI writes it under a file:// backend (JSON, or gzipped JSON)."""
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        checkpoint = json.loads(raw).get("checkpoint") or {}
        latest = checkpoint.get("latest") or {}
        resources = [
            DeployedResource(r["urn"], r["type"], _urn_name(r["urn"]), r.get("id") or None,
                             r.get("inputs") or {}, r.get("outputs") or {})
            for r in latest.get("resources") or []
            if r.get("custom", True) and not r["type"].startswith("pulumi:pulumi:")
        ]
        stack = checkpoint.get("stack") or path.name.split(".json")[0]
        return cls.from_resources(stack.rsplit("/", 1)[-1], resources)

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
    """The launch template version the node runs after the up."""
    template_version: str | None = None
    """The template's current version."""

    @property
    def erases_scratch(self) -> bool:
        return self.action == "replace"


def node_changes(prior: Deployment | None, resources: Sequence[PlannedResource]) -> list[NodeChange]:
    """Per planned node, what an `up` from the prior deployment does to it, and why."""
    templates = {r.id: r for r in resources if r.type == LAUNCH_TEMPLATE and r.id}
    changes = []
    for r in resources:
        if r.type != INSTANCE:
            continue
        node = node_name(r.urn, r.name)
        pool = node.rsplit("-", 1)[0]
        ref = _plain(r.props.get(TEMPLATE_REF)) or {}
        current = _text(ref.get("version"))
        before = prior.get(r.type, r.name) if prior else None
        if before is None:
            changes.append(NodeChange(node, pool, "create", f"created on launch template version {current}",
                                      current, current))
            continue
        pinned = _pinned_version(before)
        ignored = set(r.ignore_changes)
        differ = [k for k in input_changes(before.inputs, r.props) if k not in ignored or k == TEMPLATE_REF]
        others = [k for k in differ if k != TEMPLATE_REF]
        moved = TEMPLATE_REF in differ
        rolled = moved and TEMPLATE_REF not in ignored
        fixed = sorted(REPLACING_INPUTS.intersection(others))
        why = _template_news(prior, templates.get(ref.get("id")), pinned, current) if moved else ""
        if rolled or fixed:
            # a replacement keeps ignored inputs at their state value: a node replaced unrolled stays on its version
            cause = (f"onto launch template version {current} (was {pinned}; {why}) because it is rolled" if rolled
                     else f"because {', '.join(fixed)} cannot change in place")
            changes.append(NodeChange(
                node, pool, "replace",
                f"replaced {cause}: deleted before its replacement is created, which erases its instance store "
                "(local NVMe scratch) and root volume; keep checkpoints in the bucket or the parallel file system",
                current if rolled else pinned, current))
            continue
        held = (f"keeps launch template version {pinned} (the template is now version {current}: {why}): nodes "
                f"ignore template changes, so it is not replaced; `goldenenv up --roll-nodes {node}` replaces it "
                f"onto version {current}") if moved else f"on launch template version {pinned}"
        if others:
            changes.append(NodeChange(node, pool, "update", f"updated in place ({', '.join(others)}); {held}",
                                      pinned, current))
        else:
            changes.append(NodeChange(node, pool, "keep", held if moved else f"unchanged, {held}", pinned, current))
    return sorted(changes, key=lambda c: _node_order(c.node))


def pinning_note(resources: Sequence[PlannedResource]) -> str:
    """For a plan without a prior deployment: how later template changes reach the nodes."""
    versions = sorted({_text((_plain(r.props.get(TEMPLATE_REF)) or {}).get("version"))
                       for r in resources if r.type == INSTANCE} - {None})
    if not versions:
        return ""
    return (f"nodes pin launch template version {', '.join(versions)}: a later template change (boot script, tags, "
            "host AMI) reaches running nodes only with `goldenenv up --roll-nodes`, which replaces them (erasing "
            "their local NVMe scratch)")


def summarize(changes: Sequence[NodeChange]) -> str:
    counts = {a: sum(c.action == a for c in changes) for a in ("create", "keep", "update", "replace")}
    return ", ".join(f"{n} to {a}" for a, n in counts.items() if n) or "no nodes"


def stale_nodes(deployment: Deployment) -> list[str]:
    """Nodes whose pinned launch template version is not their template's latest: what `up --roll-nodes`
    replaces when no node is named. A node still on a symbolic version ($Default, from before nodes pinned one)
    counts as stale: rolling pins it."""
    templates = {r.id: r for r in deployment.of_type(LAUNCH_TEMPLATE) if r.id}
    stale = []
    for r in deployment.of_type(INSTANCE):
        ref = _plain(r.inputs.get(TEMPLATE_REF) or r.outputs.get(TEMPLATE_REF)) or {}
        template = templates.get(ref.get("id"))
        if template is None:
            continue
        pinned = _text(ref.get("version"))
        if pinned in SYMBOLIC_VERSIONS or pinned != _text(template.outputs.get(TEMPLATE_VERSION)):
            stale.append(node_name(r.urn, r.name))
    return sorted(stale, key=_node_order)


def roll(target: Any, nodes: Sequence[str], log: Callable[[str], None] = print,
         one_at_a_time: bool = True) -> list[str]:
    """Replace these nodes onto their pool's current launch template: one `up` per node (the others keep
    running), or all in one `up`. `target` is an Automation API stack (`up(on_output=)`, `workspace.env_vars`);
    the roll variable is set for each `up` and restored after. Returns the nodes rolled."""
    env = target.workspace.env_vars
    batches = [[n] for n in nodes] if one_at_a_time else ([list(nodes)] if nodes else [])
    if not batches:
        log("no node to roll: every node runs its template's latest version")
        return []
    had, previous = ROLL_NODES_ENV in env, env.get(ROLL_NODES_ENV)
    rolled: list[str] = []
    try:
        for step, batch in enumerate(batches, 1):
            names = ", ".join(batch)
            log(f"rolling {names} ({step}/{len(batches)}): replaced onto the current launch template, "
                "its instance store (local NVMe scratch) is erased")
            env[ROLL_NODES_ENV] = ",".join(batch)
            target.up(on_output=log)
            rolled += batch
            log(f"rolled {names}")
    finally:
        if had:
            env[ROLL_NODES_ENV] = previous
        else:
            env.pop(ROLL_NODES_ENV, None)
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


def node_name(urn: str, name: str) -> str:
    """The node's name as goldenenv speaks of it (pool-index): its resource name less the stack prefix."""
    stack = urn.split("::", 1)[0].removeprefix("urn:pulumi:")
    return name.removeprefix(f"{stack}-")


def _node_order(node: str) -> tuple[str, int, str]:
    """gpu-2 before gpu-10: resources register in no fixed order."""
    pool, _, index = node.rpartition("-")
    return (pool, int(index), node) if index.isdigit() else (node, -1, node)


def _pinned_version(node: DeployedResource) -> str | None:
    ref = _plain(node.inputs.get(TEMPLATE_REF) or node.outputs.get(TEMPLATE_REF)) or {}
    return _text(ref.get("version"))


def _template_news(prior: Deployment | None, template: PlannedResource | None, pinned: str | None,
                   current: str | None) -> str:
    """Why a node's template moved: which of the template's inputs changed since the last deployment."""
    before = prior.get(template.type, template.name) if prior and template else None
    differ = input_changes(before.inputs, template.props) if before else []
    if differ:
        return "changed " + ", ".join(INPUT_MEANING.get(k, k) for k in differ)
    if pinned in SYMBOLIC_VERSIONS:
        return f"the node was created on {pinned}, before nodes pinned a version"
    return f"the template moved to version {current} in an earlier up that did not roll this node"


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

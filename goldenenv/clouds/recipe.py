"""The cluster's order, written once: retained stores, the cloud's scope, network, data store, image repository,
secret store and head, node pools with their boot, budget guard, and the stack's standard outputs.

Each cloud supplies its parts: a `Parts` subclass with one method per part, each returning a small typed output
(DataStore, Repository, SecretStore, Head, NodePool, BudgetGuard). The recipe calls them in order, renders every
host's boot (HeadBoot, NodeBoot) from those outputs, and registers the outputs every stack has. A cloud without a
part (no image repository, no head, no budget guard) leaves its method out: `provided` says which parts a cloud
has, and the recipe builds only those, so what a cluster can do follows from its parts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pulumi

from goldenenv.clouds.base import HEAD_OUTPUTS, BuildContext, HeadShape, HostsBy, get, head_shape
from goldenenv.clouds.stores import golden_image_ref
from goldenenv.nodeboot import HeadBoot, MungeKey, NodeBoot, SharedFs, SlurmNode, launch_outputs, slurm_conf
from goldenenv.spec import ClusterSpec

Outputs = dict[str, Any]


class Part(str, Enum):
    """The parts of a cluster, in the order the recipe builds them."""

    SCOPE = "scope"
    """What the other parts sit in (resource groups, the project), where the cloud has such a thing."""
    NETWORK = "network"
    DATA_STORE = "data_store"
    REPOSITORY = "repository"
    SECRET_STORE = "secret_store"
    HEAD = "head"
    NODE_POOL = "node_pool"
    BUDGET_GUARD = "budget_guard"


REQUIRED = frozenset({Part.NETWORK, Part.DATA_STORE, Part.NODE_POOL})
"""Every cloud's cluster has these: nodes on a network with a place for data."""

@dataclass(frozen=True)
class DataStore:
    """The stack's data: how every host mounts its shared file system (None: the stack has none), and its outputs."""

    mount: pulumi.Input[SharedFs | None]
    outputs: Outputs = field(default_factory=dict)


@dataclass(frozen=True)
class Repository:
    """The stack's image repository: the URL nodes pull the golden image from (outputs imageRepository)."""

    url: pulumi.Output[str]


@dataclass(frozen=True)
class SecretStore:
    """Where the stack's munge key lives. `key(reader)` is the boot's adapter for a host reading it: reader is the
    host's own identity where the store needs one (Azure: its managed identity's client id), else None."""

    key: Callable[[pulumi.Input[str] | None], pulumi.Output[MungeKey]]


@dataclass(frozen=True)
class Head:
    """The Slurm head: its private address and instance id (outputs clouds.base.HEAD_OUTPUTS) and any other way
    the cloud reaches it."""

    private_ip: pulumi.Output[str]
    instance_id: pulumi.Output[str]
    outputs: Outputs = field(default_factory=dict)


@dataclass(frozen=True)
class NodePool:
    """One pool's nodes: their addresses (and ids where the cloud gives each node one), the pool they are and its
    instance type (catalog.InstanceType), and the cloud's own component, for the cloud's outputs."""

    pool: Any
    instance_type: Any
    private_ips: pulumi.Output[list[str]]
    instance_ids: pulumi.Output[list[str]] | None
    component: Any


@dataclass(frozen=True)
class BudgetGuard:
    """What watches the stack's spend (and on some clouds its time to live and idleness): its outputs."""

    outputs: Outputs = field(default_factory=dict)


@dataclass(frozen=True)
class Boot:
    """What every host's boot is made of; the head and node pool parts ask it for their hosts' user data."""

    spec: ClusterSpec
    registry_login: str | None
    image_ref: pulumi.Output[str | None]
    mount: pulumi.Input[SharedFs | None]
    secret: SecretStore | None = None
    head_ip: pulumi.Input[str] | None = None
    conf: str | None = None
    """The head's slurm.conf (given to the head part only)."""

    def head(self, reader: pulumi.Input[str] | None = None,
             mount: pulumi.Input[SharedFs | None] | None = None) -> pulumi.Output[str]:
        """The head's cloud-config: the golden container running slurmctld, the munge key (the head writes it when
        the store holds none), the shared file system (mount: the head's own, where it differs from the nodes')."""
        if self.secret is None or self.conf is None:
            raise RuntimeError("a head's boot needs the secret store's munge key and slurm.conf: the recipe gives both")
        spec, conf, login = self.spec, self.conf, self.registry_login
        return pulumi.Output.all(
            mount=self.mount if mount is None else mount, image_ref=self.image_ref, key=self.secret.key(reader),
        ).apply(lambda v: HeadBoot(spec, v["image_ref"], v["key"], conf, registry_login=login)
                .cloud_config(v["mount"]))

    def node(self, pool: str, fabric: str, local_nvme: bool,
             reader: pulumi.Input[str] | None = None) -> pulumi.Output[str]:
        """A pool's nodes' cloud-config: the golden container, and slurmd registering with the head when there is
        one."""
        spec, login = self.spec, self.registry_login
        key = self.secret.key(reader) if self.secret and self.head_ip is not None else None
        return pulumi.Output.all(mount=self.mount, image_ref=self.image_ref, head_ip=self.head_ip, key=key).apply(
            lambda v: NodeBoot(
                spec, pool, fabric=fabric, local_nvme=local_nvme, image_ref=v["image_ref"], registry_login=login,
                slurm=SlurmNode(v["head_ip"], v["key"]) if v["head_ip"] else None,
            ).cloud_config(v["mount"]))


@dataclass(frozen=True)
class Built:
    """What the recipe built, for the cloud's own outputs."""

    image_ref: pulumi.Output[str | None]
    head: Head | None
    pools: list[NodePool]
    instance_ids: pulumi.Output[list[str]] | None


class CloudOf:
    """A parts class's `cloud`: the Cloud class the registry holds under `name`, looked up when first read.

    A cloud's package defines its Cloud class, whose build runs the parts (clouds/<cloud>/parts.py); naming the
    cloud here, rather than importing its class, keeps the parts module below its package (no import circle)."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, instance: Any, owner: type) -> type:
        return type(get(self.name))


class Parts:
    """A cloud's parts. Subclasses set `cloud` (its Cloud class, or CloudOf(its name): the default head type,
    slurmd's timeout) and `registry_login` (the boot's registry login adapter, node/registry-login-<name>.sh.j2 in
    the cloud's templates/ folder; None: the hosts pull with no login), and define network, data_store, node_pool
    and outputs; scope, repository, secret_store, head and budget_guard where the cloud has them. The recipe sets `parent`
    (the cluster component) and `child` (options that make a resource its child) before the first part."""

    cloud: Any
    registry_login: str | None = None
    scope: Callable[[], None] | None = None
    repository: Callable[[], Repository] | None = None
    secret_store: Callable[[], SecretStore] | None = None
    head: Callable[[HeadShape, Boot], Head] | None = None
    budget_guard: Callable[[list[NodePool]], BudgetGuard] | None = None
    budget_output: str | None = None
    """The output naming the budget guard, where the guard watches the budget alone (a stop function): a stack that
    asks for no budget gets it as None and no guard. None: the guard watches more than the budget (AWS's reaper: the
    time to live and idleness too) and is asked on every stack."""

    parent: pulumi.ComponentResource
    child: pulumi.ResourceOptions

    def __init__(self, name: str, spec: ClusterSpec, context: BuildContext):
        self.name, self.spec, self.context = name, spec, context

    def check(self) -> None:
        """Refuse the stack before any resource is declared (raise ConfigError); by default nothing to refuse."""

    def retained_stores(self) -> None:
        """Find what outlives the stack and which of it this up adopts; refuse a store that is not the stack's."""

    def network(self) -> None:
        raise NotImplementedError

    def data_store(self) -> DataStore:
        raise NotImplementedError

    def node_pool(self, pool: Any, boot: Boot) -> NodePool:
        raise NotImplementedError

    def outputs(self, built: Built) -> Outputs:
        """The cloud's own outputs, beside the standard ones."""
        return {}

    def rolled(self, pool: Any) -> frozenset[int]:
        """The pool's nodes this up replaces (`up --roll-nodes`), by index."""
        return frozenset(i for i in range(pool.count) if self.context.rolls(pool.name, f"{pool.name}-{i}"))


def provided(parts: type[Parts]) -> frozenset[Part]:
    """The parts a cloud implements: the required ones, and each optional one whose method it defines."""
    return REQUIRED | {part for part in Part if part not in REQUIRED and getattr(parts, part.value) is not None}


class Cluster(pulumi.ComponentResource):
    """A cloud's GpuCluster (type goldenenv:<cloud>:GpuCluster): the recipe run with the cloud's `parts`."""

    parts: type[Parts]
    outputs: Outputs

    def __init__(self, name: str, spec: ClusterSpec, context: BuildContext,
                 opts: pulumi.ResourceOptions | None = None):
        parts = self.parts(name, spec, context)
        parts.check()
        super().__init__(f"goldenenv:{parts.cloud.name}:GpuCluster", name, None, opts)
        parts.parent, parts.child = self, pulumi.ResourceOptions(parent=self)
        self.outputs = build(parts)
        self.register_outputs(self.outputs)


def budget_guard(parts: Parts, pools: list[NodePool]) -> BudgetGuard | None:
    """The cloud's budget guard, where it has one; a guard of the budget alone is not asked for a stack with no
    budget, whose output (budget_output) is then None."""
    if not parts.budget_guard:
        return None
    if parts.budget_output and not parts.spec.budget:
        return BudgetGuard({parts.budget_output: None})
    return parts.budget_guard(pools)


def build(parts: Parts) -> Outputs:
    """Run the order with the cloud's parts; the stack's outputs."""
    spec = parts.spec
    # the retained stores first: a store that cannot be adopted is refused before any cloud resource is declared
    parts.retained_stores()
    if parts.scope:
        parts.scope()
    parts.network()
    data = parts.data_store()
    repository = parts.repository() if parts.repository else None
    image_ref = (golden_image_ref(spec, repository.url) if repository
                 else pulumi.Output.from_input(spec.image.ref))
    boot = Boot(spec, parts.registry_login, image_ref, data.mount)

    head = None
    if parts.secret_store and parts.head and (shape := head_shape(spec, parts.cloud)):
        boot = dataclasses.replace(boot, secret=parts.secret_store())
        head = parts.head(shape, dataclasses.replace(boot, conf=slurm_conf(spec, parts.cloud.slurmd_timeout)))
        boot = dataclasses.replace(boot, head_ip=head.private_ip)

    pools = [parts.node_pool(pool, boot) for pool in spec.nodes]
    guard = budget_guard(parts, pools)

    all_ips = pulumi.Output.all(*[p.private_ips for p in pools]).apply(lambda lists: sum(lists, []))
    slots = [p.instance_type.gpu_count for p in pools for _ in range(p.pool.count)]
    ids = None
    if all(p.instance_ids is not None for p in pools):
        ids = pulumi.Output.all(*[p.instance_ids for p in pools]).apply(lambda lists: sum(lists, []))
    outputs: Outputs = {**launch_outputs(all_ips, slots), **({"instanceIds": ids} if ids is not None else {})}
    outputs.update(data.outputs)
    outputs.update(guard.outputs if guard else {})
    outputs.update(parts.outputs(Built(image_ref, head, pools, ids)))
    if repository:
        outputs["imageRepository"] = repository.url
    outputs["imageRef"] = image_ref
    if head:
        outputs.update({HEAD_OUTPUTS[HostsBy.PRIVATE_IP]: head.private_ip,
                        HEAD_OUTPUTS[HostsBy.INSTANCE_ID]: head.instance_id, **head.outputs})
    return outputs

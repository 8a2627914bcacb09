"""The local cloud: node containers from the golden image on a private Docker network.

No account, no Pulumi engine: the Docker SDK provisions it (cluster.py). It offers none of the
cloud capabilities (RDMA, spot, budgets ...), so a stack asking for them gets a clear error.
"""

from __future__ import annotations

import difflib
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.base import CloudDefaults, NodeReach
from goldenenv.clouds.local.settings import DATA, SLURMD_TIMEOUT_S
from goldenenv.clouds.owncluster import OwnCluster
from goldenenv.spec import ClusterSpec, Problem, pool_key


class LocalCloud(CloudDefaults):
    """The protocol's defaults hold here (no readiness rules, no repository, no head of a cloud's, nothing to
    adopt or purge through the cloud): up, destroy and the node commands drive the containers themselves."""

    name = "local"
    capabilities: frozenset = frozenset()
    uses_pulumi = False
    slurmd_timeout = SLURMD_TIMEOUT_S
    """A lost node container is DOWN this soon: the local drill sees its requeue quickly."""
    user_data_limit = None
    """Its containers get their boot files from goldenenv itself: no user data."""
    registry_types: tuple[str, ...] = ()
    """Its nodes run the image built on this machine: `image push -s local` has no repository to push to."""
    """One machine: no zones."""
    reaches_nodes_by = NodeReach.DOCKER
    """Its nodes and head are containers on this machine's Docker engine."""
    shared_folder = DATA
    """Every node and the head mount the stack's data volume there."""
    key_props = {
    "docker:container": ("image", "cpus", "memoryGib", "ranks", "role"),
    "docker:network": ("internal",),
    "docker:volume": ("mount",),
    }
    data_bearing = {"container": "its scratch erased"}
    store_kinds = ("volume",)
    """Kinds of the retained stores plan names (their settings, also kept, are not listed)."""
    placeholder_account = None

    def check(self, spec: ClusterSpec) -> list[Problem]:
        shapes = catalog.local_shapes()
        problems = []
        for i, pool in enumerate(spec.nodes):
            if pool.instance_type not in shapes:
                close = difflib.get_close_matches(pool.instance_type, shapes, n=1)
                hint = f" — did you mean {close[0]}?" if close else f"; local shapes: {', '.join(shapes)}"
                problems.append(Problem(f"{pool_key(i, len(spec.nodes))}.instanceType",
                                        f"{pool.instance_type!r} is not a local node shape{hint}"))
            if pool.ssh_public_key:
                problems.append(Problem(f"{pool_key(i, len(spec.nodes))}.sshPublicKey",
                                        "the local cluster's nodes are containers on this machine, reached without "
                                        "ssh: drop sshPublicKey (it is for cloud nodes)"))
        if len(spec.nodes) > 1:
            problems.append(Problem("goldenenv:nodes", "the local cloud runs one pool; give a single mapping"))
        return problems

    def planned_resources(self, spec: ClusterSpec) -> list:
        """What `goldenenv up` creates, in the plan's terms (no engine is asked)."""
        from goldenenv.clouds.local.cluster import DATA, Names
        from goldenenv.guardrails import PlannedResource
        from goldenenv.images.lock import load

        names = Names(spec.stack)
        shape = catalog.local_shapes()[spec.nodes[0].instance_type]
        urn = f"urn:goldenenv:{spec.stack}::local"
        found = [
            PlannedResource(f"{urn}::network", "docker:network", names.network, {"internal": True}, custom=True),
            PlannedResource(f"{urn}::volume", "docker:volume", names.volume, {"mount": DATA}, custom=True,
                            retain_on_delete=True),
        ]
        found += [
            PlannedResource(f"{urn}::node-{i}", "docker:container", names.node(i),
                            {"image": load(spec.image.lock).tag, "cpus": shape.cpus, "memoryGib": shape.memory_gib,
                             "ranks": shape.processes_per_node}, custom=True)
            for i in range(spec.nodes[0].count)
        ]
        if spec.scheduler == "slurm":
            image = load(spec.image.lock).tag
            found += [
                PlannedResource(f"{urn}::head", "docker:container", names.head,
                                {"image": image, "role": "slurmctld and slurmdbd"}, custom=True),
                PlannedResource(f"{urn}::db", "docker:container", names.db,
                                {"image": image, "role": "MariaDB: the accounting history"}, custom=True),
                PlannedResource(f"{urn}::accounting", "docker:volume", names.accounting,
                                {"mount": "MariaDB's files; exported to the data volume by destroy"}, custom=True),
                PlannedResource(f"{urn}::munge", "docker:volume", names.munge, {"mount": "munge key, 0400"},
                                custom=True),
                PlannedResource(f"{urn}::slurm", "docker:volume", names.slurm_state,
                                {"mount": "slurmctld state"}, custom=True),
                PlannedResource(f"{urn}::recovery", "docker:container", names.recovery,
                                {"image": image, "role": "starts a lost node, head or database again"}, custom=True),
            ]
        return found

    def own_cluster(self, spec: ClusterSpec, client: Any = None) -> OwnCluster:
        """The stack's containers on this machine's Docker engine (or `client`'s): clouds/local/cluster.py, imported
        when a step drives them (the Docker SDK loads then)."""
        from goldenenv.clouds.local.cluster import LocalCluster

        return LocalCluster(spec, client)

    def build(self, spec: ClusterSpec, context=None) -> dict[str, Any]:
        from goldenenv.spec import ConfigError

        raise ConfigError([Problem("goldenenv:cloud", "the local cloud is provisioned by `goldenenv up -s "
                                   f"{spec.stack}`, not by `pulumi up` (it needs only a Docker engine)")])

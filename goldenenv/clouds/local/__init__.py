"""The local cloud: node containers from the golden image on a private Docker network.

No account, no Pulumi engine: the Docker SDK provisions it (cluster.py). It offers none of the
cloud capabilities (RDMA, spot, budgets ...), so a stack asking for them gets a clear error.
"""

from __future__ import annotations

import difflib
from typing import Any

from goldenenv import catalog
from goldenenv.spec import ClusterSpec, Problem, pool_key


class LocalCloud:
    name = "local"
    capabilities: frozenset = frozenset()
    uses_pulumi = False

    def check(self, spec: ClusterSpec) -> list[Problem]:
        shapes = catalog.local_shapes()
        problems = []
        for i, pool in enumerate(spec.nodes):
            if pool.instance_type not in shapes:
                close = difflib.get_close_matches(pool.instance_type, shapes, n=1)
                hint = f" — did you mean {close[0]}?" if close else f"; local shapes: {', '.join(shapes)}"
                problems.append(Problem(f"{pool_key(i, len(spec.nodes))}.instanceType",
                                        f"{pool.instance_type!r} is not a local node shape{hint}"))
        if len(spec.nodes) > 1:
            problems.append(Problem("goldenenv:nodes", "the local cloud runs one pool; give a single mapping"))
        return problems

    def build(self, spec: ClusterSpec) -> dict[str, Any]:
        from goldenenv.spec import ConfigError

        raise ConfigError([Problem("goldenenv:cloud", "the local cloud is provisioned by `goldenenv up -s "
                                   f"{spec.stack}`, not by `pulumi up` (it needs only a Docker engine)")])

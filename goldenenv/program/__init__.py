"""The Pulumi program: stack config → spec → the cloud's components → stack outputs.

`pulumi up -s STACK` runs __main__.py in this folder; `goldenenv plan` runs build() under
Pulumi's mock runtime. Both read the same config through stackconfig and build the same way.
"""

from __future__ import annotations

import os
from typing import Any

import pulumi

from goldenenv import clouds, stackconfig
from goldenenv.spec import ConfigError


def build(context: clouds.BuildContext | None = None) -> dict[str, Any]:
    """Declare every resource of the stack; return its outputs. `pulumi up` builds with the live context."""
    spec = stackconfig.from_pulumi()
    cloud = clouds.validate(spec)
    return cloud.build(spec, context or clouds.BuildContext.from_env())


def refuse_incompatible() -> None:
    """`pulumi up` run directly checks the lock against the stack's scheduler and every pool too, before anything is
    declared; an up (not a preview) also refuses a pool whose host layer lacks a need, as `goldenenv up` does."""
    from goldenenv import compat

    spec = stackconfig.from_pulumi()
    creating = not pulumi.runtime.is_dry_run()
    refused = [f"{c.rule}: {c.message}" for c in compat.scheduler_conflicts(spec) if c.severity == compat.ERROR]
    refused += [f"{pool.pool_key} ({pool.instance_type}, {pool.host.label}): {c.rule}: {c.message}"
                for pool in compat.check_stack(spec) for c in pool.conflicts
                if c.severity == compat.ERROR or (creating and c.rule == compat.HOST_LAYER)]
    if refused:
        raise pulumi.RunError("the image lock does not fit the nodes:\n" + "\n".join(refused))


def main() -> None:
    try:
        if not os.environ.get(clouds.DESTROYING_ENV):  # a destroy runs the program for its hooks, creates nothing
            refuse_incompatible()
        outputs = build()
    except ConfigError as e:
        raise pulumi.RunError(f"{e.heading}:\n{e}") from None
    for key, value in outputs.items():
        if value is not None:
            pulumi.export(key, value)

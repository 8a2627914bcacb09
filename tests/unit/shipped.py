"""The shipped stacks the contract tests run over, by cloud: one list, so every rule holds the same stacks (and a
new cloud's stacks join every rule the day they are added)."""

from __future__ import annotations

from pathlib import Path

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

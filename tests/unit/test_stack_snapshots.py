"""The cloud seam holds: adding a cloud changes no other cloud's stacks. Every shipped AWS and Alibaba Cloud stack
plans exactly the resources it planned before.

The snapshot (tests/unit/snapshots/<stack>.json) holds each planned resource's URN, type, parent, options and
inputs, and the stack outputs, from the offline plan (placeholder account, nothing retained). Regenerate it only
for a change meant to alter those stacks: `GOLDENENV_SNAPSHOT=write .venv/bin/python -m pytest tests/unit/test_stack_snapshots.py`,
and say in the commit what changed and why.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pulumi
import pytest

from goldenenv.plan import STACKS, plan

ROOT = Path(__file__).resolve().parents[2]

SNAPSHOTS = Path(__file__).parent / "snapshots"
SNAPSHOT_CLOUDS = ("aws", "alicloud")
"""The clouds whose stacks are held to their snapshots; a new cloud's stacks join once they are meant to stay."""
PINNED_STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml")
                       for cloud in SNAPSHOT_CLOUDS for p in STACKS.glob(f"Pulumi.{cloud}-*.yaml"))


def snapshot(stack: str) -> dict:
    result = plan(stack)
    return json.loads(json.dumps({
        "resources": sorted((
            {"urn": r.urn, "type": r.type, "parent": r.parent_urn, "custom": r.custom,
             "retainOnDelete": r.retain_on_delete, "protect": r.protect, "ignoreChanges": list(r.ignore_changes),
             "deleteBeforeReplace": r.delete_before_replace, "import": r.import_id, "props": r.props}
            for r in result.resources), key=lambda r: r["urn"]),
        "outputs": result.outputs,
    }, sort_keys=True, default=_plain))


def _plain(value):
    """Assets by what they hold (a file of the repository), not by object identity."""
    if isinstance(value, pulumi.AssetArchive):
        return {"archive": value.assets}
    if isinstance(value, pulumi.FileAsset):
        return {"file": str(Path(value.path).resolve().relative_to(ROOT))}
    return str(value)


@pytest.mark.parametrize("stack", PINNED_STACKS)
def test_stack_plans_what_its_snapshot_holds(stack):
    path = SNAPSHOTS / f"{stack}.json"
    now = snapshot(stack)
    if os.environ.get("GOLDENENV_SNAPSHOT") == "write":
        path.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    before = json.loads(path.read_text())
    assert [r["urn"] for r in now["resources"]] == [r["urn"] for r in before["resources"]]
    for mine, theirs in zip(now["resources"], before["resources"]):
        assert mine == theirs, mine["urn"]
    assert now["outputs"] == before["outputs"]

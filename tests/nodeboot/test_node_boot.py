"""Every shipped cloud stack's node boots for real: the user data plan renders, run by cloud-init and systemd on an
emulated host; the golden container comes up by digest with its mounts, the stack's key logs in, validate and run
work over ssh, and a stop/start brings everything back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from goldenenv import catalog, fabrics, lifecycle
from goldenenv.images.dockerfile import UID

CLOUD_STACKS = ["aws-g5-dev", "aws-p5-2node", "aws-p4d-4node-spot", "alicloud-gn7i-dev", "alicloud-ebmgn8v-2node"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def up(booted) -> None:
    """Every goldenenv unit active and the golden container running."""
    host = booted.host
    host.wait_for("every goldenenv unit active and the golden container running", lambda: (
        set(host.units_state(booted.units).values()) == {"active"} and host.golden() is not None))


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_the_node_boots_into_the_golden_container_by_digest(boot, golden_ref, client, stack):
    booted = boot(stack)
    up(booted)
    golden = booted.host.golden()
    assert golden.attrs["Config"]["Image"] == golden_ref, "the container runs the locked digest"
    assert golden.image.id == client.images.get(golden_ref).id
    assert golden.attrs["HostConfig"]["RestartPolicy"]["Name"] in ("", "no"), "systemd owns its restarts"

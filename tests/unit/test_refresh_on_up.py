"""`up` reads the cloud back before it changes anything, so a node the cloud took away comes back.

A reclaimed one-time spot node, one the budget's hard stop terminated, an Alibaba spot node released on reclaim:
the cloud deleted it, Pulumi's state still holds it. Without a refresh `up` trusts the state and reports no changes;
with one the node leaves the state and the same `up` creates it again. `goldenenv up` asks for the refresh itself,
and a plain `pulumi up` gets it from the project file (`options: refresh: always`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from goldenenv import automation, project, stackconfig
from goldenenv.plan import stack_file

REPO = Path(__file__).resolve().parents[2]
STACK = "aws-p4d-4node-spot"
NODE = "aws-p4d-4node-spot-gpu-3"


class CloudStack:
    """An Automation API stack over a cloud that deleted one node: `up` recreates what its state no longer holds
    once a refresh has read the cloud back; without one the state still holds the node and nothing changes."""

    program = {f"aws-p4d-4node-spot-gpu-{i}" for i in range(4)}

    def __init__(self, state: set[str], cloud: set[str]):
        self.state, self.cloud = state, cloud
        self.calls: list[tuple[str, dict]] = []

    def outputs(self):
        return {}

    def refresh(self, on_output=None, **options):
        self.calls.append(("refresh", options))
        self.state &= self.cloud

    def preview(self, on_output=None, **options):
        self.calls.append(("preview", options))

    def up(self, on_output=None, **options):
        self.calls.append(("up", options))
        if options.get("refresh"):
            self.refresh()
        created = sorted(self.program - self.state)
        self.state |= self.program
        self.cloud |= self.program
        if on_output:
            on_output(f"Resources: {len(created)} created" if created else "Resources: no changes")
        return type("Result", (), {"outputs": {}})()


@pytest.fixture
def spec():
    return stackconfig.load(STACK, *stackconfig.namespaced(yaml.safe_load(stack_file(STACK).read_text())["config"]))


@pytest.fixture
def no_guard(monkeypatch):
    monkeypatch.setattr(automation, "guard", lambda spec, creating, **_: None)
    monkeypatch.setattr(automation, "_before_up", lambda spec, log: None)


def test_up_after_a_spot_reclaim_brings_the_node_back(spec, no_guard):
    reclaimed = CloudStack(state=set(CloudStack.program), cloud=set(CloudStack.program) - {NODE})
    lines: list[str] = []
    automation.up(spec, log=lines.append, target=reclaimed)
    assert NODE in reclaimed.cloud, "the reclaimed node was not created again"
    assert "Resources: 1 created" in lines


def test_up_refreshes_in_the_same_update(spec, no_guard):
    target = CloudStack(state=set(CloudStack.program), cloud=set(CloudStack.program))
    automation.up(spec, log=lambda line: None, target=target)
    assert target.calls[0] == ("up", {"refresh": True})


def test_preview_refreshes_too(spec, monkeypatch, no_guard):
    target = CloudStack(state=set(), cloud=set())
    monkeypatch.setattr(automation, "stack", lambda spec: target)
    automation.preview(spec, log=lambda line: None)
    assert target.calls == [("preview", {"refresh": True})]


def test_the_installed_automation_api_takes_refresh_on_up_and_preview():
    import inspect

    from pulumi.automation import Stack

    assert "refresh" in inspect.signature(Stack.up).parameters
    assert "refresh" in inspect.signature(Stack.preview).parameters


@pytest.mark.parametrize("project_file", [REPO / "Pulumi.yaml", project.SCAFFOLD / project.PROJECT_FILE],
                         ids=["this project", "goldenenv init"])
def test_a_plain_pulumi_up_refreshes_as_the_project_file_says(project_file):
    text = project_file.read_text()
    if "$name" in text:
        import string

        text = string.Template(text).substitute(name="infra")
    assert yaml.safe_load(text)["options"]["refresh"] == "always"


def test_a_project_goldenenv_init_writes_refreshes(tmp_path):
    project.init(tmp_path / "infra")
    assert yaml.safe_load((tmp_path / "infra" / "Pulumi.yaml").read_text())["options"] == {"refresh": "always"}

"""`destroy` keeps the stores it promises to keep, and can finish: nothing it deletes still holds one of them.

An Alibaba resource group that still holds a resource cannot be deleted (DeleteResourceGroup; error
DeleteConflict.ResourceGroup.Resource), so a retained bucket inside the stack's resource group made every destroy
fail at its last step. The plans below are read the way `pulumi destroy` acts on them: what is retained
(retain_on_delete) stays, everything else is deleted, containers last.

`--purge-data` is the user asking for the stores by name: a `pulumi destroy` that fails part way still purges them,
then says what was purged, what is left and how to finish; an export that fails before anything is deleted purges
nothing. The destroy target is a fake Automation API stack whose destroy raises as the CLI's CommandError does.
"""

from __future__ import annotations


import copy
import json
from pathlib import Path

import pytest

from goldenenv import automation, clouds, stackconfig
from goldenenv.clouds.alicloud import RESOURCE_GROUP_CONFLICT, RETAINED_IN_GROUP, AlicloudCloud, dataflow, storage
from goldenenv.clouds.alicloud.registry import repository_names
from goldenenv.clouds.alicloud.storage import Found, OfflineLookup
from goldenenv.clouds.base import BuildContext
from goldenenv.guardrails import Severity
from goldenenv.lifecycle import load_spec
from goldenenv.plan import STACKS, plan_config, stack_file
import fake_automation

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TRAINING, DEV = "alicloud-ebmgn8v-2node", "alicloud-gn7i-dev"
ACCOUNT = "1234567890123456"
GROUP = "alicloud:resourcemanager/resourceGroup:ResourceGroup"
BUCKET = "alicloud:oss/bucket:Bucket"
CONTAINED_BY = ("resourceGroupId",)
"""Properties that put a resource inside another one, which cannot be deleted while it holds it."""
CAPTURES = Path(__file__).parent / "captures"


def capture(name: str) -> dict:
    """A NAS answer from captures/ (assembled in the NAS 2017-06-26 response model: test_alicloud_lifecycle)."""
    return json.loads((CAPTURES / f"alicloud_nas_{name}.json").read_text())


def config(stack: str) -> dict:
    return stackconfig.read_stack_file(stack_file(stack))


def nas(stack: str = TRAINING) -> dict:
    """The training stack where Alibaba offers no CPFS: NAS extreme."""
    changed = copy.deepcopy(config(stack))
    changed["goldenenv:region"] = "cn-hongkong"
    del changed["goldenenv:zone"]
    return changed


def pulumi_stacks() -> list[str]:
    names = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS.glob("Pulumi.*.yaml"))
    return [n for n in names if clouds.get(config(n)["goldenenv:cloud"]).uses_pulumi]


def planned(stack: str, values: dict | None = None, lookup=None):
    context = BuildContext(lookup=lookup) if lookup is not None else None
    return plan_config(stack, values or config(stack), context=context)


def held_by_deleted(result) -> list[str]:
    """Each retained resource that names, as its container, a resource destroy deletes."""
    deleted = {r.id: r for r in result.resources if r.custom and not r.retain_on_delete and r.id}
    return [f"{kept.name} in {deleted[kept.props[key]].name} ({deleted[kept.props[key]].type})"
            for kept in result.kept_on_destroy for key in CONTAINED_BY if kept.props.get(key) in deleted]


# ---------------------------------------------------------------- what destroy keeps is outside what it deletes

@pytest.mark.parametrize("stack", pulumi_stacks())
def test_no_store_destroy_keeps_sits_in_a_resource_destroy_deletes(stack):
    result = planned(stack)
    assert result.kept_on_destroy, "every cloud stack keeps its bucket"
    assert held_by_deleted(result) == []


@pytest.mark.parametrize("variant", ["nas", "adopted"])
def test_neither_nas_extreme_nor_an_adopted_bucket_sits_in_the_stacks_group(variant):
    if variant == "nas":
        result = planned("nas", nas())
    else:
        first = planned(TRAINING, lookup=OfflineLookup(ACCOUNT))
        name = first.outputs["bucket"]
        result = planned(TRAINING, lookup=OfflineLookup(ACCOUNT, buckets={name: Found(name, {})}))
        assert result.of_type(BUCKET)[0].import_id == name
    assert held_by_deleted(result) == []


def test_the_bucket_lives_outside_the_stacks_group_and_the_rest_of_the_stack_inside_it():
    result = planned(TRAINING)
    (group,) = result.of_type(GROUP)
    assert not group.retain_on_delete  # destroy deletes the group ...
    (bucket,) = result.of_type(BUCKET)
    assert bucket.retain_on_delete and "resourceGroupId" not in bucket.props  # ... so the bucket is not in it
    inside = {r.type.rsplit(":", 1)[-1] for r in result.resources if r.props.get("resourceGroupId") == group.id}
    assert {"Network", "SecurityGroup", "Instance", "FileSystem"} <= inside
    assert all(not r.retain_on_delete for r in result.resources if r.props.get("resourceGroupId") == group.id)


def test_plan_strict_refuses_a_retained_store_inside_the_group_destroy_deletes():
    result = planned(TRAINING)
    assert [f for f in AlicloudCloud().readiness(result.resources, result.spec.stack_tags)
            if f.rule == RETAINED_IN_GROUP] == []
    (group,) = result.of_type(GROUP)
    moved = [r if r.type != BUCKET else type(r)(**{**r.__dict__, "props": {**r.props, "resourceGroupId": group.id}})
             for r in result.resources]
    (finding,) = [f for f in AlicloudCloud().readiness(moved, result.spec.stack_tags) if f.rule == RETAINED_IN_GROUP]
    assert finding.severity is Severity.ERROR and RESOURCE_GROUP_CONFLICT in finding.message
    assert f"{TRAINING}-data-bucket" in finding.message and group.name in finding.message


# ---------------------------------------------------------------- destroy that fails part way

class FailingDestroy(Exception):
    """What the Automation API raises when `pulumi destroy` exits non-zero (auto.CommandError's text)."""


# assembled, not recorded: CommandError's layout, the error code DeleteResourceGroup documents, a message in its words


DELETE_CONFLICT = ("code: 255\n stdout: Destroying (alicloud-ebmgn8v-2node):\n ...\n stderr: error: deleting "
                   "urn:pulumi:alicloud-ebmgn8v-2node::goldenenv::goldenenv:alicloud:GpuCluster$alicloud:resourcemanager/"
                   "resourceGroup:ResourceGroup::alicloud-ebmgn8v-2node-rg: 1 error occurred:\n"
                   f"  * [SDK alibaba-cloud-sdk-go ERROR] Code: {RESOURCE_GROUP_CONFLICT}\n"
                   "  Message: The resource group still contains resources and cannot be deleted.\n")


class Export:
    def __init__(self, deployment: dict):
        self.deployment = deployment


class FakeStack(fake_automation.FakeStack):
    """The part of an Automation API stack destroy uses; its destroy fails part way when told to."""

    def __init__(self, outputs: dict, error: str | None = None, left: list[dict] | None = None):
        super().__init__(outputs)
        self.error, self.left = error, left or []

    def destroy(self, on_output=None, run_program=None):
        super().destroy(on_output, run_program)
        if self.error:
            raise FailingDestroy(self.error)

    def export_stack(self):
        return Export({"resources": [{"urn": "urn:pulumi:s::goldenenv::pulumi:pulumi:Stack::s",
                                      "type": "pulumi:pulumi:Stack", "custom": False}, *self.left]})


class FakeBucket:
    def __init__(self, name: str, versions: int = 3):
        self.name = name
        self.stored = [(f"checkpoints/step-{n}.pt", f"v{n}") for n in range(versions)]
        self.deleted: list[tuple[str, str]] = []
        self.bucket_deleted = False

    def find(self):
        return None if self.bucket_deleted else Found(self.name, {})

    def versions(self, key_marker, version_marker):
        return list(self.stored), "", "", False

    def delete_versions(self, batch):
        self.deleted += batch

    def delete_bucket(self):
        self.bucket_deleted = True


class FakeAcr:
    def __init__(self, error: Exception | None = None):
        self.error, self.deleted = error, []

    def delete_repository(self, namespace, name):
        if self.error:
            raise self.error
        self.deleted.append(f"{namespace}/{name}")
        return True


@pytest.fixture(scope="module")
def spec():
    return load_spec(TRAINING)


@pytest.fixture
def alibaba(monkeypatch, spec):
    """The Alibaba calls destroy and purge make, answered here: the data flow's export, the bucket, the ACR."""
    for var, value in {"ALIBABA_CLOUD_ACCESS_KEY_ID": "id", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret"}.items():
        monkeypatch.setenv(var, value)
    calls = {"bucket": None, "acr": FakeAcr(), "export": "completed"}

    def bucket(name, region, credentials=None):
        calls["bucket"] = calls["bucket"] or FakeBucket(name)
        return calls["bucket"]

    def nas_client(region, credentials):
        return lambda action, params: capture({"CreateDataFlowTask": "CreateDataFlowTask"}.get(
            action, f"DescribeDataFlowTasks_{calls['export']}"))

    monkeypatch.setattr(storage, "oss_bucket", bucket)
    monkeypatch.setattr(storage, "AcrApi", lambda region, credentials, purpose="": calls["acr"])
    monkeypatch.setattr(dataflow, "nas_client", nas_client)
    monkeypatch.setattr(dataflow, "POLL_SECONDS", 0.0)
    return calls


OUTPUTS = {"bucket": "kept-data-bucket", "resourceGroup": "rg-0a1b2c3d4e5f", "fileSystemId": "cpfs-0a1b2c3d4e5f6a7b",
           "dataFlowId": "df-2b3c4d5e6f7a8b9c", "filesetId": "fset-1", "filesetPath": "/goldenenv/"}
LEFT = [{"urn": "urn:pulumi:s::goldenenv::alicloud:resourcemanager/resourceGroup:ResourceGroup::rg",
         "type": "alicloud:resourcemanager/resourceGroup:ResourceGroup", "custom": True, "id": "rg-0a1b2c3d4e5f"},
        {"urn": "urn:pulumi:s::goldenenv::pulumi:providers:alicloud::alicloud", "type": "pulumi:providers:alicloud",
         "custom": True, "id": "p-1"}]


def test_purge_data_still_purges_when_destroy_fails_part_way_and_says_what_is_left(spec, alibaba):
    target, lines = FakeStack(OUTPUTS, DELETE_CONFLICT, LEFT), []
    with pytest.raises(automation.LifecycleError) as failed:
        automation.destroy(spec, purge_data=True, log=lines.append, target=target)
    assert target.calls == ["destroy"]
    bucket = alibaba["bucket"]
    assert bucket.bucket_deleted and len(bucket.deleted) == 3  # every object version, then the bucket
    namespace, repo = repository_names(spec.tags.project, spec.stack, spec.image.lock)
    assert alibaba["acr"].deleted == [f"{namespace}/{repo}"]
    message = str(failed.value)
    assert f"pulumi destroy of {TRAINING} failed part way" in message
    assert "The resource group still contains resources" in message  # the provider's own words
    assert f"--purge-data deleted the retained stores all the same, as asked: kept-data-bucket, {namespace}/{repo}" \
        in message
    assert "still in the stack: ResourceGroup rg-0a1b2c3d4e5f" in message and "providers" not in message
    assert "Transfer resources across resource groups" in message  # how to empty the group of an older bucket
    # the bucket CPFS would export to is gone: the next destroy skips the export
    assert message.splitlines()[-1] == f"fix the cause above, then run `goldenenv destroy -s {TRAINING} " \
                                       "--skip-export` to finish"
    assert isinstance(failed.value.__cause__, FailingDestroy)


def test_without_purge_data_a_failed_destroy_keeps_the_stores_and_says_so(spec, alibaba):
    target = FakeStack(OUTPUTS, "code: 255\n stderr: error: the backend is unreachable\n")
    with pytest.raises(automation.LifecycleError) as failed:
        automation.destroy(spec, log=lambda m: None, target=target)
    assert alibaba["bucket"] is None and alibaba["acr"].deleted == []  # never touched
    message = str(failed.value)
    assert "failed part way: code: 255 / stderr: error: the backend is unreachable" in message
    assert "the retained stores are kept (bucket kept-data-bucket" in message
    assert "still in the stack: nothing" in message and RESOURCE_GROUP_CONFLICT not in message
    assert message.endswith(f"run `goldenenv destroy -s {TRAINING}` to finish")


def test_a_failed_export_refuses_before_anything_is_destroyed_or_purged(spec, alibaba):
    alibaba["export"] = "failed"
    target = FakeStack(OUTPUTS, DELETE_CONFLICT)
    with pytest.raises(automation.LifecycleError, match="Nothing was destroyed"):
        automation.destroy(spec, purge_data=True, log=lambda m: None, target=target)
    assert target.calls == [] and alibaba["bucket"] is None and alibaba["acr"].deleted == []


def test_a_purge_that_fails_too_is_said_with_the_destroys_error(spec, alibaba):
    alibaba["acr"] = FakeAcr(RuntimeError("Forbidden.RAM: no cr:DeleteRepo"))
    target = FakeStack(OUTPUTS, DELETE_CONFLICT, LEFT)
    with pytest.raises(automation.LifecycleError) as failed:
        automation.destroy(spec, purge_data=True, log=lambda m: None, target=target)
    message = str(failed.value)
    assert "failed part way" in message and RESOURCE_GROUP_CONFLICT in message
    assert "--purge-data could not delete the retained stores (Forbidden.RAM: no cr:DeleteRepo)" in message
    assert message.endswith(f"run `goldenenv destroy -s {TRAINING} --purge-data` to finish")


def test_a_destroy_that_succeeds_purges_as_before(spec, alibaba):
    target = FakeStack(OUTPUTS)
    purged = automation.destroy(spec, purge_data=True, log=lambda m: None, target=target)
    namespace, repo = repository_names(spec.tags.project, spec.stack, spec.image.lock)
    assert purged == ["kept-data-bucket", f"{namespace}/{repo}"] and alibaba["bucket"].bucket_deleted


def test_purge_on_a_failed_destroy_is_the_clouds_own_purge_on_aws_too(monkeypatch):
    aws = load_spec("aws-g5-dev")
    cloud = clouds.get("aws")
    asked = []
    monkeypatch.setattr(type(cloud), "before_destroy", lambda self, *a: None, raising=False)
    monkeypatch.setattr(type(cloud), "purge", lambda self, spec, outputs, log: asked.append(outputs) or ["b"])
    with pytest.raises(automation.LifecycleError, match="deleted the retained stores all the same, as asked: b"):
        automation.destroy(aws, purge_data=True, log=lambda m: None,
                           target=FakeStack({"bucket": "b"}, "stderr: error: DependencyViolation"))
    assert asked == [{"bucket": "b"}]


def test_the_hint_for_a_group_that_still_holds_a_resource_names_the_group_and_the_bucket(spec):
    (hint,) = AlicloudCloud().destroy_hints(spec, OUTPUTS, DELETE_CONFLICT)
    assert "rg-0a1b2c3d4e5f" in hint and "kept-data-bucket" in hint and storage.RETAINED_GROUP in hint
    assert AlicloudCloud().destroy_hints(spec, OUTPUTS, "stderr: Throttling.User") == []

"""The reaper against moto's EC2: it stops exactly the stack's expired nodes, and nothing else."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pytest

from goldenenv import spec
from goldenenv.clouds.aws import reaper

STACK, OTHER = "team-a", "team-b"
PROJECT = "finetune"
IMAGE = "ami-12c6146b"
"""Any id will do: moto launches it without looking it up."""


def stack_tags(stack: str = STACK, project: str = PROJECT, **more: str) -> dict[str, str]:
    """The two tags every node of a stack carries (goldenenv.spec.Tags.resolved), plus any given."""
    return {reaper.PROJECT_TAG_KEY: project, reaper.STACK_TAG_KEY: stack, **more}


def launch(ec2, tags: dict[str, str], **extra) -> str:
    specs = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    (instance,) = ec2.run_instances(ImageId=IMAGE, MinCount=1, MaxCount=1, InstanceType="t3.micro",
                                    TagSpecifications=specs, **extra)["Instances"]
    return instance["InstanceId"]


def states(ec2) -> dict[str, str]:
    return {i["InstanceId"]: i["State"]["Name"]
            for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}


def launched(ec2, instance_id: str) -> datetime:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["LaunchTime"]


@pytest.fixture
def fleet(ec2):
    """Two hours after launch: team-a has one expired node, one with time left and one without a ttl."""
    ids = {
        "expired": launch(ec2, stack_tags(**{reaper.TTL_TAG_KEY: "1"})),
        "fresh": launch(ec2, stack_tags(**{reaper.TTL_TAG_KEY: "3"})),
        "no-ttl": launch(ec2, stack_tags()),
        "other-stack": launch(ec2, stack_tags(OTHER, **{reaper.TTL_TAG_KEY: "1"})),
        "untagged": launch(ec2, {}),
    }
    now = max(launched(ec2, i) for i in ids.values()) + timedelta(hours=2)
    return ids, now


def test_tag_keys_are_the_ones_the_program_uses():
    assert reaper.STACK_TAG_KEY == spec.STACK_TAG_KEY
    resolved = spec.Tags(project="finetune", owner="ml", cost_center="cc").resolved("dev")
    assert resolved[reaper.PROJECT_TAG_KEY] == "finetune" and resolved[reaper.STACK_TAG_KEY] == "dev"


STANDALONE = """
import sys
from datetime import datetime, timezone
import reaper, stopcore
assert "goldenenv" not in sys.modules and "boto3" not in sys.modules
class Ec2:
    stopped = []
    def describe_instances(self, **kw):
        return {"Reservations": [{"Instances": [{"InstanceId": "i-1", "State": {"Name": "running"}}]}]}
    def stop_instances(self, InstanceIds):
        self.stopped += InstanceIds
ec2 = Ec2()
report = reaper.hard_stop(ec2, "p", "s", datetime(2025, 6, 1, tzinfo=timezone.utc))
print(ec2.stopped, [d.instance_id for d in report.acted], reaper.month_of(datetime(2025, 6, 30, 23, tzinfo=timezone.utc)))
"""


def test_the_reapers_package_imports_and_runs_on_its_own(tmp_path):
    """The deployed package (reaper.py and the stop core beside it) with nothing else on the path, site-packages
    included: it imports the standard library and the core only, and boto3 only inside the handler."""
    import subprocess

    from goldenenv.clouds.aws.teardown import reaper_archive

    for name, asset in reaper_archive().assets.items():
        (tmp_path / name).write_bytes(Path(asset.path).read_bytes())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reaper.py", "stopcore.py"]
    done = subprocess.run([sys.executable, "-S", "-I", "-c", f"import sys; sys.path[:0] = [{str(tmp_path)!r}]\n"
                           + STANDALONE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['i-1'] ['i-1'] 2025-06"


def test_stop_stops_only_the_stacks_expired_node(ec2, fleet):
    ids, now = fleet
    before = states(ec2)
    report = reaper.reap(ec2, PROJECT, STACK, now, "stop")

    assert [(d.instance_id, d.action) for d in report.acted] == [(ids["expired"], "stop")]
    after = states(ec2)
    assert after[ids["expired"]] in ("stopping", "stopped")
    assert {i: s for i, s in after.items() if i != ids["expired"]} == {
        i: s for i, s in before.items() if i != ids["expired"]}
    assert {d.instance_id for d in report.kept} == {ids["fresh"], ids["no-ttl"]}
    assert report.failed == []


def test_other_stacks_and_untagged_instances_are_not_even_considered(ec2, fleet):
    ids, now = fleet
    report = reaper.reap(ec2, PROJECT, STACK, now, "terminate")
    seen = {d.instance_id for d in report.acted + report.kept + report.failed}
    assert ids["other-stack"] not in seen and ids["untagged"] not in seen
    assert states(ec2)[ids["other-stack"]] == states(ec2)[ids["untagged"]] == "running"


def test_kept_instances_say_why(ec2, fleet):
    ids, now = fleet
    reasons = {d.instance_id: d.reason for d in reaper.reap(ec2, PROJECT, STACK, now).kept}
    assert reaper.TTL_TAG_KEY in reasons[ids["no-ttl"]]
    expires = launched(ec2, ids["fresh"]) + timedelta(hours=3)
    assert expires.isoformat() in reasons[ids["fresh"]]


def test_nothing_expires_before_its_time(ec2, fleet):
    ids, _ = fleet
    just_before = launched(ec2, ids["expired"]) + timedelta(hours=1) - timedelta(seconds=1)
    assert reaper.reap(ec2, PROJECT, STACK, just_before).acted == []
    assert set(states(ec2).values()) == {"running"}


def test_dry_run_reports_the_same_candidates_and_changes_nothing(ec2, fleet):
    _, now = fleet
    before = states(ec2)
    dry = reaper.reap(ec2, PROJECT, STACK, now, "stop", dry_run=True)
    assert states(ec2) == before
    real = reaper.reap(ec2, PROJECT, STACK, now, "stop")
    assert dry.acted == real.acted and dry.kept == real.kept
    assert all(line.startswith(f"project={PROJECT} stack={STACK}") for line in dry.log_lines())
    assert any("would stop" in line for line in dry.log_lines())


def test_terminate_terminates(ec2, fleet):
    ids, now = fleet
    report = reaper.reap(ec2, PROJECT, STACK, now, "terminate")
    assert [(d.instance_id, d.action) for d in report.acted] == [(ids["expired"], "terminate")]
    assert states(ec2)[ids["expired"]] in ("shutting-down", "terminated")


def test_a_one_time_spot_node_is_terminated_because_it_cannot_be_stopped(ec2):
    spot = launch(ec2, stack_tags(**{reaper.TTL_TAG_KEY: "1"}), InstanceMarketOptions={"MarketType": "spot"})
    report = reaper.reap(ec2, PROJECT, STACK, launched(ec2, spot) + timedelta(hours=2), "stop")
    assert [(d.instance_id, d.action) for d in report.acted] == [(spot, "terminate")]
    assert states(ec2)[spot] in ("shutting-down", "terminated")


@pytest.mark.parametrize("ttl", ["soon", "0", "-1", "nan", "inf"])
def test_a_bad_ttl_tag_skips_the_node_and_says_so(ec2, ttl):
    node = launch(ec2, stack_tags(**{reaper.TTL_TAG_KEY: ttl}))
    report = reaper.reap(ec2, PROJECT, STACK, launched(ec2, node) + timedelta(days=365))
    assert report.acted == report.kept == []
    assert [d.instance_id for d in report.skipped] == [node]
    assert repr(ttl) in report.skipped[0].reason
    assert any(f"SKIPPED {node}" in line for line in report.log_lines())
    assert states(ec2)[node] == "running"


def test_fractional_hours_count(ec2):
    node = launch(ec2, stack_tags(**{reaper.TTL_TAG_KEY: "0.5"}))
    start = launched(ec2, node)
    assert reaper.reap(ec2, PROJECT, STACK, start + timedelta(minutes=29), dry_run=True).acted == []
    assert [d.instance_id for d in reaper.reap(ec2, PROJECT, STACK, start + timedelta(minutes=30)).acted] == [node]


def test_an_unknown_action_or_a_naive_time_is_refused(ec2):
    with pytest.raises(ValueError, match="reboot"):
        reaper.reap(ec2, PROJECT, STACK, datetime.now(timezone.utc), "reboot")
    with pytest.raises(ValueError, match="time zone"):
        reaper.reap(ec2, PROJECT, STACK, datetime.now())
    with pytest.raises(ValueError, match="project"):
        reaper.reap(ec2, "", STACK, datetime.now(timezone.utc))


class _StopFails:
    """The moto client, except that StopInstances fails as it does for an instance EC2 cannot stop."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def stop_instances(self, **kwargs):
        raise RuntimeError("UnsupportedOperation: cannot stop")


class Ec2Refusing:
    """The moto client, refusing StopInstances as EC2 does where moto does not: "You can only stop an Amazon
    EBS-backed instance" (Amazon EC2 User Guide, "Stop and start Amazon EC2 instances"); an EBS-backed instance with
    instance-store volumes (p5's 8 local NVMe) stops, and the volumes' data is lost. The message is EC2's as
    tools quote it; the code is UnsupportedOperation."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def stop_instances(self, **kwargs):
        from botocore.exceptions import ClientError

        described = self._client.describe_instances(InstanceIds=kwargs["InstanceIds"])
        for instance in (i for r in described["Reservations"] for i in r["Instances"]):
            if instance.get("RootDeviceType") != "ebs":
                raise ClientError({"Error": {"Code": "UnsupportedOperation", "Message": (
                    f"The instance '{instance['InstanceId']}' does not have an 'ebs' root device type and cannot "
                    "be stopped.")}}, "StopInstances")
        return self._client.stop_instances(**kwargs)


def test_the_refusing_ec2_refuses_an_instance_store_root_and_stops_an_ebs_one(ec2):
    instance_id = launch(ec2, stack_tags())
    refusing = Ec2Refusing(ec2)
    refusing.stop_instances(InstanceIds=[instance_id])
    assert states(ec2)[instance_id] in ("stopping", "stopped")

    class InstanceStoreRoot(Ec2Refusing):
        pass

    store = InstanceStoreRoot(ec2)
    store._client = type("Described", (), {
        "describe_instances": staticmethod(lambda **_: {"Reservations": [{"Instances": [
            {"InstanceId": instance_id, "RootDeviceType": "instance-store"}]}]})})()
    with pytest.raises(Exception, match="UnsupportedOperation"):
        store.stop_instances(InstanceIds=[instance_id])


def test_a_failed_stop_is_reported_not_hidden(ec2, fleet):
    ids, now = fleet
    report = reaper.reap(_StopFails(ec2), PROJECT, STACK, now, "stop")
    assert report.acted == []
    assert [(d.instance_id, d.action) for d in report.failed] == [(ids["expired"], "stop")]
    assert "UnsupportedOperation" in report.failed[0].reason
    assert any("FAILED" in line for line in report.log_lines())


# ---------------------------------------------------------------- the Lambda entry point

@pytest.fixture
def lambda_env(monkeypatch, fleet):
    _, now = fleet
    monkeypatch.setenv(reaper.PROJECT_ENV, PROJECT)
    monkeypatch.setenv(reaper.STACK_ENV, STACK)
    monkeypatch.setenv(reaper.ACTION_ENV, "stop")
    monkeypatch.setenv(reaper.DRY_RUN_ENV, "false")
    monkeypatch.setattr(reaper, "utc_now", lambda: now)
    return monkeypatch


def test_handler_reads_its_configuration_from_the_environment(ec2, fleet, lambda_env, capsys):
    ids, _ = fleet
    result = reaper.handler({}, None)
    assert (result["stack"], result["action"], result["dry_run"]) == (STACK, "stop", False)
    assert [d["instance_id"] for d in result["acted"]] == [ids["expired"]]
    assert states(ec2)[ids["expired"]] in ("stopping", "stopped")
    assert ids["expired"] in capsys.readouterr().out

    lambda_env.setenv(reaper.STACK_ENV, OTHER)
    lambda_env.setenv(reaper.ACTION_ENV, "terminate")
    result = reaper.handler({}, None)
    assert [d["instance_id"] for d in result["acted"]] == [ids["other-stack"]]
    assert states(ec2)[ids["other-stack"]] in ("shutting-down", "terminated")


def test_handler_dry_run_from_the_environment_or_the_event(ec2, fleet, lambda_env):
    ids, _ = fleet
    before = states(ec2)
    assert reaper.handler({"dryRun": True}, None)["dry_run"] is True
    lambda_env.setenv(reaper.DRY_RUN_ENV, "true")
    result = reaper.handler({"dryRun": False}, None)
    assert result["dry_run"] is True, "an event cannot turn a configured dry run off"
    assert [d["instance_id"] for d in result["acted"]] == [ids["expired"]]
    assert states(ec2) == before


def test_handler_refuses_an_unreadable_dry_run_flag(ec2, fleet, lambda_env):
    lambda_env.setenv(reaper.DRY_RUN_ENV, "maybe")
    before = states(ec2)
    with pytest.raises(ValueError, match=reaper.DRY_RUN_ENV):
        reaper.handler({}, None)
    assert states(ec2) == before


def test_handler_fails_the_invocation_when_a_node_could_not_be_stopped(ec2, fleet, lambda_env, capsys):
    ids, _ = fleet
    lambda_env.setattr(boto3, "client", lambda *a, **k: _StopFails(ec2))
    with pytest.raises(RuntimeError, match="could not be torn down"):
        reaper.handler({}, None)
    assert f"FAILED to stop {ids['expired']}" in capsys.readouterr().out


@pytest.mark.parametrize("ttl", ["abc", "-5", "1e309", "nan", "", "0"])
def test_handler_fails_the_invocation_naming_a_node_whose_ttl_tag_cannot_be_read(ec2, fleet, lambda_env, capsys, ttl):
    """Lambda's Errors metric counts a failed invocation; a skipped node would otherwise run forever unnoticed."""
    ids, _ = fleet
    unreadable = launch(ec2, stack_tags(**{reaper.TTL_TAG_KEY: ttl}))
    with pytest.raises(RuntimeError, match=f"could not be judged and keep running: {unreadable} .*{ttl!r}"):
        reaper.handler({}, None)
    out = capsys.readouterr().out
    assert f"SKIPPED {unreadable}" in out and "1 acted on, 2 kept, 1 skipped, 0 failed" in out
    assert states(ec2)[ids["expired"]] in ("stopping", "stopped"), "its siblings are still reaped"

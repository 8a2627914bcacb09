"""`goldenenv host-image build`: each cloud's bake program under Pulumi's mocks (build instance from the pool's
pinned stock image with the install script as user data, private, hardened, tagged; capture after the host step
after the instance; the image retained, the instance not), and the orchestration with a stand-in for the
Automation API that runs the program and its host step as the engine would (record then destroy; a failed
install or check destroys the build stack, records nothing, and names the step)."""

from __future__ import annotations

import base64
import datetime
import dill
import pytest
from typer.testing import CliRunner

from goldenenv import catalog, clouds, compat, plan
from goldenenv.cli import app
from goldenenv.images import bake, host, hostfiles
from goldenenv.images.hostinstall import install_script
from goldenenv.lifecycle import load_spec
from goldenenv.spec import ConfigError

from tests.unit.shipped import pulumi_stacks

BUILT = datetime.datetime(2026, 3, 4, 5, 6, 7, tzinfo=datetime.UTC)
BAKED = [(cloud, stack) for cloud, stack in pulumi_stacks() if bake.cloud_program(cloud) is not None]
DYNAMIC = "pulumi-python:dynamic:Resource"


def prepared(stack: str) -> bake.Bake:
    try:
        return bake.prepare(load_spec(stack), None)
    except ConfigError as e:
        pytest.skip(f"{stack} is not bakeable as shipped: {e.problems[0]}")


def lookup_for(module):
    return module.OfflineGalleries() if hasattr(module, "OfflineGalleries") else None


def program_of(target: bake.Bake, step: bake.HostStepProvider | None = None):
    module = bake.cloud_program(target.spec.cloud)
    step = step or bake.HostStepProvider(target.layer, cloud=target.spec.cloud, instance_type=target.instance_type,
                                         fabric=target.fabric, seal_commands=tuple(module.SEAL))
    args = bake.bake_args(target, step, bake.targets_of(target, ssh_user="tester"), BUILT, lookup_for(module))
    return module, args, (lambda: module.program(target.spec, target.pool, args))


class _DependencyMonitor(plan._RecordingMonitor):
    """The plan's recording monitor, also keeping each resource's dependencies (explicit and from its inputs)."""

    dependencies: dict[str, set[str]] = {}

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        _DependencyMonitor.dependencies[response.urn] = set(request.dependencies)
        return response


class _CallRecordingCloud:
    """The stack's cloud for the mocks, keeping the invokes the program makes (an AMI looked up by name)."""

    def __init__(self, cloud):
        self.cloud, self.calls = cloud, []

    def plan_call(self, args):
        self.calls.append(args)
        return self.cloud.plan_call(args)

    def __getattr__(self, name):
        return getattr(self.cloud, name)


def run_under_mocks(target: bake.Bake, monkeypatch, step=None):
    module, args, program = program_of(target, step)
    monkeypatch.setattr(plan, "_RecordingMonitor", _DependencyMonitor)
    _DependencyMonitor.dependencies = {}
    cloud = _CallRecordingCloud(clouds.get(target.spec.cloud))
    records, outputs = plan.record(program, cloud, target.stack_name)
    return module, args, records, outputs, dict(_DependencyMonitor.dependencies), cloud.calls


def one(records, type_token: str):
    found = [r for r in records if r.type == type_token]
    assert len(found) == 1, f"{type_token}: {[r.name for r in found]}"
    return found[0]


def get(props, path: str):
    for key in path.split("."):
        props = props[int(key)] if isinstance(props, list) else props.get(key)
        if props is None:
            return None
    return props


# what each cloud's build instance declares, read from its inputs: (image, user data, private, hardened)
BASE_IMAGE = {"aws": "ami", "gcp": "bootDisk.initializeParams.image", "alicloud": "imageId",
              "azure": "storageProfile.imageReference"}


def user_data(cloud: str, props) -> str:
    if cloud == "aws":
        return props["userData"]
    if cloud == "gcp":
        return props["metadata"]["user-data"]
    if cloud == "alicloud":
        return base64.b64decode(props["userData"]).decode()
    return base64.b64decode(props["osProfile"]["customData"]).decode()


def private_and_hardened(cloud: str, instance, records) -> None:
    props = instance.props
    if cloud == "aws":
        assert props["associatePublicIpAddress"] is False
        assert props["metadataOptions"]["httpTokens"] == "required"
        assert props["rootBlockDevice"]["encrypted"] is True
    elif cloud == "alicloud":
        assert props["internetMaxBandwidthOut"] == 0
        assert props["httpTokens"] == "required"
        assert props["systemDiskEncrypted"] is True
    elif cloud == "gcp":
        assert all(not nic.get("accessConfigs") for nic in props["networkInterfaces"])
        assert props["metadata"]["serial-port-enable"] == "FALSE"
        assert props["metadata"]["block-project-ssh-keys"] == "TRUE"
        assert props["shieldedInstanceConfig"]["enableVtpm"] is True
    else:
        nic = one(records, "azure-native:network:NetworkInterface").props
        assert all(not c.get("publicIPAddress") for c in nic["ipConfigurations"])
        assert props["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
        assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"


def tags_of(cloud: str, resource) -> dict:
    return resource.props.get("labels" if cloud == "gcp" else "tags") or {}


def expected_tags(cloud: str, target: bake.Bake) -> dict:
    wanted = {bake.HOST_LOCK_TAG: f"{target.host_lock.name}-{target.host_lock.content_hash}",
              bake.LAYER_TAG: target.layer.digest}
    if cloud == "gcp":
        from goldenenv.clouds.gcp import labels

        return labels.labels(wanted)
    return wanted


@pytest.mark.parametrize(("cloud", "stack"), BAKED)
def test_the_build_instance_boots_the_pinned_image_with_the_install_script_private_hardened_tagged(
        cloud, stack, monkeypatch):
    target = prepared(stack)
    module, args, records, _, _, calls = run_under_mocks(target, monkeypatch)
    instance = one(records, module.INSTANCE)
    host = compat.node_host(cloud, target.spec.region, target.pool.host_image)
    pinned = host.override_id or host.image.image_id
    if cloud == "aws" and not pinned:  # the dated release, looked up by its exact name and owner
        lookups = [c.args for c in calls if c.token == "aws:ec2/getAmi:getAmi"]
        assert [f["values"] for c in lookups for f in c["filters"] if f["name"] == "name"] == [[host.image.ami_name]]
        assert lookups[0]["owners"] == [host.image.owner]
        from goldenenv.clouds.aws import MOCK_AMI

        pinned = MOCK_AMI
    if cloud == "azure":
        from goldenenv.clouds.azure.nodes import image_reference

        pinned = image_reference(pinned)
    assert get(instance.props, BASE_IMAGE[cloud]) == pinned
    assert user_data(cloud, instance.props) == install_script(target.layer)
    assert instance.props.get("instanceType", instance.props.get("machineType",
                              get(instance.props, "hardwareProfile.vmSize"))) == target.pool.instance_type
    private_and_hardened(cloud, instance, records)
    capture = one(records, module.CAPTURE_TYPE)
    for resource in (instance, capture):
        assert expected_tags(cloud, target).items() <= tags_of(cloud, resource).items(), resource.name


@pytest.mark.parametrize(("cloud", "stack"), BAKED)
def test_the_capture_waits_for_the_host_step_which_waits_for_the_instance(cloud, stack, monkeypatch):
    target = prepared(stack)
    module, _, records, outputs, dependencies, _ = run_under_mocks(target, monkeypatch)
    instance, step, capture = one(records, module.INSTANCE), one(records, DYNAMIC), one(records, module.CAPTURE_TYPE)
    assert instance.urn in dependencies[step.urn]
    assert step.urn in dependencies[capture.urn]
    assert outputs["imageId"]


@pytest.mark.parametrize(("cloud", "stack"), BAKED)
def test_the_image_outlives_the_build_stack_and_the_instance_does_not(cloud, stack, monkeypatch):
    target = prepared(stack)
    module, _, records, _, _, _ = run_under_mocks(target, monkeypatch)
    assert one(records, module.CAPTURE_TYPE).retain_on_delete
    assert not one(records, module.INSTANCE).retain_on_delete
    kept = {r.type for r in records if r.retain_on_delete}
    gallery = {"azure-native:resources:ResourceGroup", "azure-native:compute:Gallery",
               "azure-native:compute:GalleryImage"}  # Azure's capture lives in a gallery that outlives it too
    assert kept - {module.CAPTURE_TYPE} <= (gallery if cloud == "azure" else set())
    network = [r for r in records if r.custom and r.type not in kept | {module.CAPTURE_TYPE}
               and any(w in r.type.lower() for w in ("subnet", "vpc", "network", "vswitch", "nat"))]
    assert network and not any(r.retain_on_delete for r in network)


def test_a_second_azure_bake_adopts_the_retained_gallery_and_adds_a_version(monkeypatch):
    target = prepared(next(stack for cloud, stack in BAKED if cloud == "azure"))
    module = bake.cloud_program("azure")
    offline, asked = module.OfflineGalleries, []

    class Galleries(offline):
        def exists(self, arm_id):
            asked.append(arm_id)
            return super().exists(arm_id)

    monkeypatch.setattr(module, "OfflineGalleries", Galleries)
    _, _, first, _, _, _ = run_under_mocks(target, monkeypatch)
    kept = [r for r in first if r.retain_on_delete and r.type != module.CAPTURE_TYPE]
    assert len(kept) == 3 and not any(r.import_id for r in kept)  # the first bake creates group, gallery, definition
    assert asked[1].endswith(f"/providers/Microsoft.Compute/galleries/{kept[1].props['galleryName']}")
    assert asked[2] == f"{asked[1]}/images/{target.family}"
    made = set(asked)
    monkeypatch.setattr(module, "OfflineGalleries", lambda: offline(existing=made))
    _, _, second, _, _, _ = run_under_mocks(target, monkeypatch)
    assert {r.import_id for r in second if r.retain_on_delete and r.type != module.CAPTURE_TYPE} == made
    assert not one(second, module.CAPTURE_TYPE).import_id


@pytest.mark.parametrize("cloud", sorted({c for c, _ in BAKED}))
def test_every_cloud_with_a_bake_program_has_a_shipped_stack_it_bakes(cloud):
    bakeable = []
    for c, stack in BAKED:
        if c == cloud:
            try:
                bakeable.append(bake.prepare(load_spec(stack), None))
            except ConfigError:
                continue
    assert bakeable, f"no shipped {cloud} stack can be baked: the program tests above would all skip"


# ---- orchestration ------------------------------------------------------------------------------------------------

class EngineStandIn:
    """The Automation API as the bake uses it: `up` runs the program under the mocks and creates its host step as
    the engine does (the provider deserialized from the state, create called; its error fails the up, as the
    engine relays it), `destroy` drops the stack. Keeps what happened, in order."""

    def __init__(self, cloud: str, events: list, published, fail_capture: bool = False):
        self.cloud, self.events, self.published, self.fail_capture = cloud, events, published, fail_capture

    def up(self, stack_name, program, log):
        self.events.append(("up", stack_name))
        records, outputs = plan.record(program, clouds.get(self.cloud), stack_name)
        for step in [r for r in records if r.type == DYNAMIC]:
            serialized = step.props["__provider"]  # a secret in the state: {<secret signature>: ..., "value": ...}
            provider = dill.loads(base64.b64decode(serialized["value"] if isinstance(serialized, dict)
                                                   else serialized))
            try:
                provider.create(dict(step.props))
            except Exception as e:  # noqa: BLE001 - as the engine: the resource's error fails the update
                raise RuntimeError(f"  {DYNAMIC} ({step.name}):\n    error: Exception calling application: {e}")
        if self.fail_capture:
            raise RuntimeError("  aws:ec2:AmiFromInstance (x-image):\n    error: creating AMI: InvalidParameter")
        self.events.append(("created", outputs["imageId"]))
        return outputs

    def destroy(self, stack_name, program, log):
        self.events.append(("destroy", stack_name, self.published().is_file()))


@pytest.fixture
def aws_target(monkeypatch):
    target = prepared(next(stack for cloud, stack in BAKED if cloud == "aws"))
    monkeypatch.setattr(bake, "targets_of", lambda bake_target, hosts_by=None, ssh_user=None:
                        lambda instance, ip: [f"ssh://ubuntu@{ip}"])
    return target


def test_a_bake_records_the_image_then_destroys_the_build_stack(aws_target, monkeypatch, tmp_path):
    events = []
    monkeypatch.setattr(bake, "wait_for_install", lambda targets, marker, ssh_config: events.append(("install",
                                                                                                       marker)))
    monkeypatch.setattr(bake, "run_host_checks", lambda layer, targets, **kw: events.append(("checks", targets)))
    monkeypatch.setattr(bake, "seal", lambda *a: events.append(("seal",)))
    published = hostfiles.published_path(aws_target.host_lock.name, tmp_path)
    entry = bake.bake(aws_target, EngineStandIn("aws", events, lambda: published), log=lambda line: None,
                      images_dir=tmp_path)
    kinds = [e[0] for e in events]
    assert kinds == ["up", "install", "checks", "seal", "created", "destroy"]
    assert events[-1] == ("destroy", aws_target.stack_name, True)  # the record was written before the destroy
    assert hostfiles.recorded(aws_target.host_lock.name, "aws", aws_target.spec.region, aws_target.base,
                         aws_target.layer.digest, tmp_path) == entry.image == events[4][1]
    assert entry.hostLock == f"{aws_target.host_lock.name}-{aws_target.host_lock.content_hash}"


@pytest.mark.parametrize(("failing", "step"), [("wait_for_install", bake.INSTALL),
                                               ("run_host_checks", bake.CHECKS)])
def test_a_failed_install_or_check_destroys_the_build_stack_and_records_nothing(aws_target, monkeypatch, tmp_path,
                                                                                failing, step):
    events = []

    def fails(*args, **kwargs):
        raise bake.StepFailed(step, "E: Version '28.0.4' for 'docker-ce' was not found")

    for name in ("wait_for_install", "run_host_checks", "seal"):
        monkeypatch.setattr(bake, name, fails if name == failing else (lambda *a, **k: None))
    published = hostfiles.published_path(aws_target.host_lock.name, tmp_path)
    with pytest.raises(bake.BakeError) as raised:
        bake.bake(aws_target, EngineStandIn("aws", events, lambda: published), log=lambda line: None, images_dir=tmp_path)
    assert raised.value.step == step
    assert str(raised.value).startswith(f"{step} failed:") and "docker-ce" in str(raised.value)
    assert events == [("up", aws_target.stack_name), ("destroy", aws_target.stack_name, False)]
    assert not published.exists()


def test_a_failed_capture_is_named_and_leaves_nothing_recorded(aws_target, monkeypatch, tmp_path):
    events = []
    for name in ("wait_for_install", "run_host_checks", "seal"):
        monkeypatch.setattr(bake, name, lambda *a, **k: None)
    published = hostfiles.published_path(aws_target.host_lock.name, tmp_path)
    with pytest.raises(bake.BakeError) as raised:
        bake.bake(aws_target, EngineStandIn("aws", events, lambda: published, fail_capture=True), log=lambda line: None,
                  images_dir=tmp_path)
    assert raised.value.step == bake.CAPTURE
    assert events[-1] == ("destroy", aws_target.stack_name, False)


def test_a_build_stack_that_will_not_go_is_said_with_how_to_finish(aws_target, monkeypatch, tmp_path):
    for name in ("wait_for_install", "run_host_checks", "seal"):
        monkeypatch.setattr(bake, name, lambda *a, **k: None)

    class Stuck(EngineStandIn):
        def destroy(self, stack_name, program, log):
            raise RuntimeError("error: deleting EC2 Instance: DependencyViolation")

    with pytest.raises(bake.BakeError) as raised:
        bake.bake(aws_target, Stuck("aws", [], lambda: None), log=lambda line: None, images_dir=tmp_path)
    assert raised.value.step == bake.CLEANUP
    assert f"pulumi destroy -s {aws_target.stack_name}" in str(raised.value) and "DependencyViolation" in str(
        raised.value)
    assert hostfiles.baked_images(aws_target.host_lock.name, tmp_path)  # the image exists: its record is kept


def test_the_cli_exits_1_naming_the_failed_step(aws_target, monkeypatch, tmp_path):
    events = []

    def fails(*args, **kwargs):
        raise bake.StepFailed(bake.INSTALL, "the repository key of docker is not 9DC8...")

    monkeypatch.setattr(bake, "wait_for_install", fails)
    monkeypatch.setattr(bake, "PulumiDriver", lambda spec: EngineStandIn("aws", events, lambda: tmp_path / "none"))
    result = CliRunner().invoke(app, ["host-image", "build", "-s", aws_target.spec.stack])
    assert result.exit_code == 1, result.output
    assert "install failed" in result.output
    assert [e[0] for e in events] == ["up", "destroy"]


def test_recorded_finds_the_image_of_exactly_this_layer_base_and_region(tmp_path):
    entry = hostfiles.BakedImage("aws", "us-east-1", "dlami-base", "abc123abc123", "ami-0123456789abcdef0",
                            "ubuntu-gpu-0123456789ab", "2026-03-04T05:06:07+00:00")
    hostfiles.record("ubuntu-gpu", entry, tmp_path)
    newer = hostfiles.BakedImage(**{**entry.__dict__, "image": "ami-0fedcba9876543210", "built": "2026-03-05T00:00:00"})
    hostfiles.record("ubuntu-gpu", newer, tmp_path)
    assert hostfiles.recorded("ubuntu-gpu", "aws", "us-east-1", "dlami-base", "abc123abc123", tmp_path) == newer.image
    assert len(hostfiles.baked_images("ubuntu-gpu", tmp_path)) == 1
    for other in (("gcp", "us-east-1", "dlami-base", "abc123abc123"), ("aws", "us-west-2", "dlami-base", "abc123abc123"),
                  ("aws", "us-east-1", "other-base", "abc123abc123"), ("aws", "us-east-1", "dlami-base", "ffffffffffff")):
        assert hostfiles.recorded("ubuntu-gpu", *other, images_dir=tmp_path) is None


def test_failed_step_reads_the_engines_error():
    from goldenenv.clouds.aws import hostimage

    assert bake.failed_step(f"error: {bake.STEP_MARK} host checks: nvidia-container-toolkit 1.17.7", hostimage) \
        == bake.CHECKS
    assert bake.failed_step("aws:ec2:Instance (x-instance):\n error: InsufficientInstanceCapacity", hostimage) \
        == bake.BUILD_INSTANCE
    assert bake.failed_step("aws:ec2:AmiFromInstance (x-image):\n error: timeout", hostimage) == bake.CAPTURE
    assert bake.failed_step("aws:ec2:NatGateway (x-nat):\n error: limit", hostimage) == bake.NETWORK


# ---- the command line ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["host-image", "--help"], ["host-image", "-h"], ["host-image", "build", "--help"],
                                  ["host-image", "build", "-h"]])
def test_help_renders(argv):
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "host" in result.output.lower()


def test_a_pool_that_is_not_the_stacks_says_which_are(aws_target):
    result = CliRunner().invoke(app, ["host-image", "build", "-s", aws_target.spec.stack, "no-such-pool"])
    assert result.exit_code == 2
    pools = ", ".join(p.name for p in aws_target.spec.nodes)
    assert f"valid: {pools}" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("provided", "said"), [
    ((host.Provided(host.ENGINE, host.IMAGE, version="28.0.4"),), "nothing to bake"),
    ((host.Provided("fs:cpfs", host.MISSING, why="the host image lacks it"),), "fs:cpfs: the host image lacks it"),
])
def test_a_pool_with_nothing_to_install_or_a_need_nobody_provides_is_refused(aws_target, monkeypatch, provided,
                                                                                  said):
    monkeypatch.setattr(host, "layer", lambda spec, pool, lock=None, **kw: host.HostLayer(
        "ubuntu-gpu", "ubuntu-22.04", provided))
    with pytest.raises(ConfigError) as raised:
        bake.prepare(aws_target.spec, None)
    assert said in str(raised.value.problems[0])
    assert raised.value.problems[0].key == f"pool {aws_target.pool.name} ({aws_target.pool.instance_type})"


def test_a_pool_baked_before_can_be_baked_again(aws_target, monkeypatch):
    """The stack's layer then says the baked image provides the install (plan/up boot it); a bake still installs."""
    monkeypatch.setattr(host, "recorded", lambda *args, **kwargs: "ami-0123456789abcdef0")
    assert not host.layer(aws_target.spec, aws_target.pool).installs
    again = bake.prepare(aws_target.spec, None)
    assert again.layer.install == aws_target.layer.install and install_script(again.layer)


def test_the_build_type_is_the_pools_unless_a_gpu_type_is_asked_for(aws_target, monkeypatch):
    gpu_types = sorted(n for n, t in catalog.instance_types("aws").items() if t.gpu_count)
    other = next(n for n in gpu_types if n != aws_target.pool.instance_type)
    assert aws_target.instance_type == aws_target.pool.instance_type
    asked = bake.prepare(aws_target.spec, None, other)
    module, _, records, _, _, _ = run_under_mocks(asked, monkeypatch)
    assert one(records, module.INSTANCE).props["instanceType"] == other
    cpu_type = clouds.get("aws").head_instance_type  # the Slurm head's CPU type
    result = CliRunner().invoke(app, ["host-image", "build", "-s", aws_target.spec.stack, "--instance-type", cpu_type])
    assert result.exit_code == 2
    assert "--instance-type" in result.output and gpu_types[0] in result.output


def test_a_record_holds_cloud_region_base_layer_image_host_lock_and_time(tmp_path):
    entry = hostfiles.BakedImage("gcp", "us-central1", "ubuntu-accel", "abc", "projects/p/global/images/i", "h-1", "t")
    path = hostfiles.record("ubuntu-gpu", entry, tmp_path)
    import yaml

    assert list(yaml.safe_load(path.read_text())["published"][0]) == [
        "cloud", "region", "base", "layer", "image", "hostLock", "built"]


# ---- the host step's own parts --------------------------------------------------------------------------------------

class FakeSsh:
    """subprocess.run for ssh: answers per remote command, in turn; keeps the remote commands asked."""

    def __init__(self, answers: dict[str, list[tuple[int, str]]]):
        self.answers, self.asked = answers, []

    def __call__(self, argv, **kwargs):
        import subprocess

        remote = argv[-1]
        self.asked.append(remote)
        key = next(k for k in self.answers if remote.startswith(k))
        rc, out = self.answers[key].pop(0) if len(self.answers[key]) > 1 else self.answers[key][0]
        return subprocess.CompletedProcess(argv, rc, out.encode(), b"ssh: connect to host: timed out" if rc == 255
                                           else b"")


def test_the_install_wait_retries_an_unreachable_host_then_finds_the_marker(monkeypatch):
    import subprocess

    ssh = FakeSsh({"cloud-init status": [(255, ""), (255, ""), (0, "status: done")], "test -f": [(0, "")]})
    monkeypatch.setattr(subprocess, "run", ssh)
    slept = []
    bake.wait_for_install(["ssh://ubuntu@10.0.0.5"], "/var/lib/goldenenv/host-layer-x.done", None, sleep=slept.append)
    assert ssh.asked == ["cloud-init status --wait"] * 3 + ["test -f /var/lib/goldenenv/host-layer-x.done"]
    assert len(slept) == 2


def test_an_install_that_left_no_marker_fails_the_install_step_with_its_log(monkeypatch):
    import subprocess

    ssh = FakeSsh({"cloud-init status": [(1, "status: error")], "test -f": [(1, "")],
                   "sudo -n tail": [(0, "goldenenv-host-layer: docker: key fingerprint 1234 is not 9DC8...")]})
    monkeypatch.setattr(subprocess, "run", ssh)
    with pytest.raises(bake.StepFailed) as raised:
        bake.wait_for_install(["ssh://ubuntu@10.0.0.5"], "/m", None, sleep=lambda s: None)
    assert str(raised.value).startswith(f"{bake.STEP_MARK} {bake.INSTALL}: ssh://ubuntu@10.0.0.5")
    assert "status: error" in str(raised.value) and "is not 9DC8" in str(raised.value)
    assert bake.failed_step(f"error: Exception calling application: {raised.value}",
                            bake.cloud_program("aws")) == bake.INSTALL


def test_failed_host_checks_fail_the_checks_step_naming_the_drift(aws_target, monkeypatch):
    from goldenenv.checks import host as host_checks

    drifted = host_checks.HostCheckResult(False, "...", {"ssh://ubuntu@10.0.0.5": ["toolkit"]},
                                          {"ssh://ubuntu@10.0.0.5": ["toolkit nvidia-container-toolkit is 1.17.7, "
                                                                     "the lock pins 1.17.8-1"]})
    asked = {}
    monkeypatch.setattr(host_checks, "check_hosts", lambda layer, targets, **kw: asked.update(kw) or drifted)
    with pytest.raises(bake.StepFailed) as raised:
        bake.run_host_checks(aws_target.layer, ["ssh://ubuntu@10.0.0.5"], cloud="aws",
                             instance_type=aws_target.instance_type, fabric=None, ssh_config=None)
    assert f"{bake.STEP_MARK} {bake.CHECKS}: ssh://ubuntu@10.0.0.5: toolkit nvidia-container-toolkit is 1.17.7" \
        in str(raised.value)
    assert asked == {"instance_type": aws_target.instance_type, "cloud": "aws", "fabric": None, "ssh_config": None}

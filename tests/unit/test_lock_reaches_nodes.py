"""The lock reaches the cloud node: checked against each pool's host image before anything is created,
the host image pinned, and the golden image pulled by digest from the stack's own repository."""

from __future__ import annotations

import base64
import copy
import json
import shutil

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import automation, catalog, compat, stackconfig
from goldenenv.cli import app
from goldenenv.clouds.aws.registry import KEEP_IMAGES, repository_name
from goldenenv.images import lock as image_lock
from goldenenv.images import publish
from goldenenv.plan import STACKS, plan, plan_config, stack_file

runner = CliRunner()
LT = "aws:ec2/launchTemplate:LaunchTemplate"
CLOUD_STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS.glob("Pulumi.aws-*.yaml"))
DIGEST = "sha256:" + "ab" * 32


def config_of(stack: str) -> dict:
    return copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))


def write_stack(tmp_path, stack: str, config: dict):
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    return tmp_path


def user_data(result) -> dict:
    return yaml.safe_load(base64.b64decode(result.of_type(LT)[0].props["userData"]).decode())


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_every_shipped_stack_shows_its_lock_checked_against_its_host_driver_and_passes(stack):
    result = runner.invoke(app, ["plan", "-s", stack], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    spec = plan(stack).spec
    host = catalog.host_image("aws", spec.region)
    assert f"lock {spec.image.lock} on goldenenv:nodes ({spec.nodes[0].instance_type}, host image {host.name} " \
           f"(driver {host.nvidia_driver})" in result.output
    assert "fits" in result.output


def test_the_catalogs_aws_host_image_fully_supports_the_h100_lock():
    """A wrong driver row fails here: CUDA 12.6 U3 needs 560.35.05 (NVIDIA's table 3)."""
    host = catalog.host_image("aws", "us-east-1")
    assert compat.driver_support("12.6.3", host.nvidia_driver).level == "full"
    assert compat._at_least(host.nvidia_driver, "560.35.05")


def test_a_p4d_stack_with_the_h100_lock_is_refused_naming_sm_80(tmp_path):
    config = config_of("aws-p4d-4node-spot")
    config["goldenenv:image"]["lock"] = "aws-h100"
    result = runner.invoke(app, ["plan", "-s", "p4d-h100", "--stacks-dir", str(write_stack(tmp_path, "p4d-h100", config))],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    assert "compat:gpu-arch-missing" in result.output
    assert "goldenenv:nodes (p4d.24xlarge" in result.output and "sm_80" in result.output
    assert "gpuArchs=sm_90" in result.output and "lock aws-h100" in result.output


def test_a_declared_host_image_whose_driver_is_too_old_is_refused_naming_both_pins(tmp_path):
    config = config_of("aws-p5-2node")
    config["goldenenv:nodes"]["hostImage"] = {"id": "ami-0123456789abcdef0", "driver": "550.54.15"}
    result = runner.invoke(app, ["plan", "-s", "old", "--stacks-dir", str(write_stack(tmp_path, "old", config))],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 1, result.output
    assert "compat:cuda-driver" in result.output
    assert "cuda=12.6.3" in result.output and "driver=550.54.15" in result.output and "560.35.05" in result.output


def test_a_declared_host_image_boots_that_id_and_is_checked_with_its_driver():
    config = config_of("aws-p5-2node")
    config["goldenenv:nodes"]["hostImage"] = {"id": "ami-0123456789abcdef0", "driver": "570.133.20"}
    result = plan_config("own-ami", config)
    assert result.of_type(LT)[0].props["imageId"] == "ami-0123456789abcdef0"
    assert result.compat[0].host.driver == "570.133.20" and result.compat[0].ok


def test_launch_templates_boot_the_pinned_dated_host_image_never_a_floating_one():
    for stack in CLOUD_STACKS:
        result = plan(stack)
        image_id = result.of_type(LT)[0].props["imageId"]
        assert image_id.startswith("ami-") and "latest" not in image_id and "resolve:" not in image_id
    host = catalog.host_image("aws", "us-east-1")
    assert host.ami_name and host.released and host.released in host.ami_name.replace("-", "")


def test_the_host_ami_is_looked_up_by_the_catalogs_exact_dated_name_and_owner(monkeypatch):
    from goldenenv import plan as plan_module

    calls = []
    original = plan_module._PlanMocks.call

    def recording(self, args):
        calls.append(args)
        return original(self, args)

    monkeypatch.setattr(plan_module._PlanMocks, "call", recording)
    plan("aws-p5-2node")
    lookup = next(c.args for c in calls if c.token == "aws:ec2/getAmi:getAmi")
    host = catalog.host_image("aws", "us-east-1")
    assert lookup["filters"] == [{"name": "name", "values": [host.ami_name]}]
    assert lookup["owners"] == [host.owner] == ["898082745236"]
    assert lookup["includeDeprecated"] is True
    assert "*" not in host.ami_name and "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)" in host.ami_name


@pytest.mark.parametrize("key, value, message", [
    ("goldenenv:nodes", {"hostImage": "dlami-latest"}, "goldenenv:nodes.hostImage: 'dlami-latest' is not a host image"),
    ("goldenenv:nodes", {"hostImage": {"id": "ubuntu-22.04", "driver": "570.133.20"}},
     "goldenenv:nodes.hostImage.id: 'ubuntu-22.04' is not an AMI id"),
    ("goldenenv:image", {"ref": "123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv/aws-h100:latest"},
     "goldenenv:image.ref"),
    ("goldenenv:storage", {"parallelFs": {"datasetPrefix": "x; touch pwned"}},
     "goldenenv:storage.parallelFs.datasetPrefix"),
])
def test_bad_host_image_and_tag_only_image_ref_are_config_errors_naming_the_key(tmp_path, key, value, message):
    config = config_of("aws-p5-2node")
    config[key].update(value)
    result = runner.invoke(app, ["plan", "-s", "bad", "--stacks-dir", str(write_stack(tmp_path, "bad", config))],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_pulumi_up_run_directly_refuses_an_incompatible_lock(monkeypatch, tmp_path):
    import pulumi

    from goldenenv import program

    config = config_of("aws-p4d-4node-spot")
    config["goldenenv:image"]["lock"] = "aws-h100"
    spec = plan("p4d-h100", write_stack(tmp_path, "p4d-h100", config)).spec
    monkeypatch.setattr(stackconfig, "from_pulumi", lambda: spec)
    with pytest.raises(pulumi.RunError, match="(?s)does not fit the nodes.*gpu-arch-missing.*sm_80"):
        program.refuse_incompatible()
    shipped = plan("aws-p4d-4node-spot").spec
    monkeypatch.setattr(stackconfig, "from_pulumi", lambda: shipped)
    program.refuse_incompatible()


def test_the_stack_declares_an_immutable_scanned_encrypted_repository_that_keeps_the_last_images():
    result = plan("aws-p5-2node")
    repo = result.of_type("aws:ecr/repository:Repository")[0].props
    assert repo["name"] == repository_name("llm-pretrain", "aws-p5-2node", "aws-h100") == "goldenenv/llm-pretrain/aws-p5-2node/aws-h100"
    assert repo["imageTagMutability"] == "IMMUTABLE"
    assert repo["imageScanningConfiguration"]["scanOnPush"] is True
    assert repo["encryptionConfigurations"][0]["encryptionType"] == "KMS"
    policy = json.loads(result.of_type("aws:ecr/lifecyclePolicy:LifecyclePolicy")[0].props["policy"])
    assert policy["rules"][0]["selection"]["countNumber"] == KEEP_IMAGES
    assert policy["rules"][0]["action"]["type"] == "expire"


def test_without_a_pushed_image_plan_warns_and_up_refuses_before_anything_is_created(monkeypatch, tmp_path):
    monkeypatch.setattr(image_lock, "IMAGES", tmp_path)  # no published.yaml anywhere
    result = plan("aws-p5-2node")
    assert result.outputs.get("imageRef") is None
    warning = next(f for f in result.findings if f.rule == "image-unpublished")
    assert "goldenenv image push aws-h100 -s aws-p5-2node" in warning.message
    assert not result.failed
    with pytest.raises(automation.LifecycleError, match="image-unpublished"):
        automation.guard(result.spec, creating=True)
    automation.guard(result.spec, creating=False)  # preview may still show the plan


def test_up_refuses_an_incompatible_stack_before_pulumi_runs(tmp_path):
    config = config_of("aws-p4d-4node-spot")
    config["goldenenv:image"]["lock"] = "aws-h100"
    stacks = write_stack(tmp_path, "p4d-h100", config)
    spec = plan("p4d-h100", stacks).spec
    with pytest.raises(automation.LifecycleError, match="compat:gpu-arch-missing.*sm_80"):
        automation.guard(spec, creating=False, stacks_dir=stacks)


def test_nodes_pull_the_pushed_digest_from_the_stacks_repository(monkeypatch, tmp_path):
    shutil.copytree(image_lock.IMAGES / "aws-h100", tmp_path / "aws-h100")
    monkeypatch.setattr(image_lock, "IMAGES", tmp_path)
    lock = image_lock.load("aws-h100")
    repository = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{repository_name('llm-pretrain', 'aws-p5-2node', 'aws-h100')}"
    publish.record(lock, publish.Published(repository, DIGEST, lock.content_hash, "2026-11-30T00:00:00+00:00", 5 * 10**9))
    result = plan("aws-p5-2node")
    assert result.outputs["imageRef"] == f"{repository}@{DIGEST}"
    text = json.dumps(user_data(result))
    assert f"{repository}@{DIGEST}" in text
    assert not [f for f in result.findings if f.rule == "image-unpublished"]
    pull = next(t for t in result.cold_start.terms if t.name == "pull")
    assert "5.00 GB compressed, as pushed" in pull.how


def test_an_image_pushed_for_an_older_lock_is_not_pulled(monkeypatch, tmp_path):
    shutil.copytree(image_lock.IMAGES / "aws-h100", tmp_path / "aws-h100")
    monkeypatch.setattr(image_lock, "IMAGES", tmp_path)
    lock = image_lock.load("aws-h100")
    repository = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{repository_name('llm-pretrain', 'aws-p5-2node', 'aws-h100')}"
    publish.record(lock, publish.Published(repository, DIGEST, "0123456789ab", "2026-11-30T00:00:00+00:00"))
    assert plan("aws-p5-2node").outputs.get("imageRef") is None


def test_plan_models_the_cold_start_and_names_the_dominant_term(monkeypatch, tmp_path):
    shutil.copytree(image_lock.IMAGES / "aws-h100", tmp_path / "aws-h100")
    monkeypatch.setattr(image_lock, "IMAGES", tmp_path)
    lock = image_lock.load("aws-h100")
    repository = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{repository_name('llm-pretrain', 'aws-p5-2node', 'aws-h100')}"
    pushed = 4 * 10**9
    publish.record(lock, publish.Published(repository, DIGEST, lock.content_hash, "2026-11-30T00:00:00+00:00", pushed))
    config = config_of("aws-p5-2node")
    config["goldenenv:storage"]["parallelFs"]["enabled"] = False
    cold = plan_config("aws-p5-2node", config).cold_start.to_json()
    terms = catalog.cold_start_terms("aws")
    by_name = {t["term"]: t["seconds"] for t in cold["terms"]}
    assert by_name["boot"] == terms["boot_to_cloud_init_s"].value
    pull = pushed / (terms["ecr_pull_mbytes_per_s_low"].value * 1e6)
    assert by_name["pull"] == pytest.approx(pull, abs=0.1)
    install = terms["host_layer_install_s"].value  # the DLAMI's engine and toolkit are not the host lock's versions
    assert by_name["host layer"] == install
    assert cold["missing"] == [] and cold["dominant"] == ("pull" if pull > install else "host layer")
    assert cold["targetSeconds"] == terms["target_cold_start_s"].value
    assert cold["meetsTarget"] is (cold["seconds"] <= cold["targetSeconds"])


def test_an_incomplete_cold_start_claims_no_dominant_term(monkeypatch, tmp_path):
    monkeypatch.setattr(image_lock, "IMAGES", tmp_path)
    result = runner.invoke(app, ["plan", "-s", "aws-p5-2node"], env={"COLUMNS": "250"})
    assert "cold start (modelled, running → torchrun-ready): boot" in result.output
    assert "= at least" in result.output and "dominates" not in result.output
    assert "not counted: image pull" in result.output


def test_push_to_a_stack_first_creates_only_its_repository(monkeypatch):
    """`image push -s STACK` runs a targeted up: the repository (with its parents and provider), no node."""
    targeted = []

    class FakeStack:
        def up(self, on_output, target):
            targeted.extend(target)

    class FakeSts:
        def get_caller_identity(self):
            return {"Account": "123456789012"}

    from goldenenv.clouds.aws import AwsCloud

    registry_url = AwsCloud.registry_url
    prepared = []
    monkeypatch.setattr(automation, "stack", lambda spec: FakeStack())
    monkeypatch.setattr(automation, "_before_up", lambda spec, log: prepared.append(spec.stack))
    monkeypatch.setattr(AwsCloud, "preflight", lambda self, spec: None)  # a login on the account (no AWS here)
    monkeypatch.setattr(AwsCloud, "registry_url", lambda self, spec: registry_url(self, spec, FakeSts()))
    url = automation.image_repository(plan("aws-p5-2node").spec, log=lambda line: None)
    assert url == "123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv/llm-pretrain/aws-p5-2node/aws-h100"
    assert prepared == ["aws-p5-2node"]  # a retained repository is adopted, not created twice
    kinds = {urn.rsplit("::", 1)[0].rsplit("$", 1)[-1].rsplit("::", 1)[-1] for urn in targeted}
    assert {"aws:ecr/repository:Repository", "aws:ecr/lifecyclePolicy:LifecyclePolicy",
            "goldenenv:aws:ImageRepository", "goldenenv:aws:GpuCluster", "pulumi:providers:aws"} == kinds


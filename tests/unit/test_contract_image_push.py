"""`goldenenv image push NAME -s STACK` works on every cloud whose stacks have a registry of their own.

On Google Cloud and Alibaba it created the repository and then crashed (`'GcpCloud' object has no attribute
'registry_url'`): the hooks were looked up with getattr, outside the Cloud protocol. Here the command runs through
the CLI against a shipped stack of every such cloud, with the targeted up and the Docker engine stood in and the
cloud's own answers recorded (moto for AWS; the gcloud and az CLIs as scripts printing their answers; ACR's
GetAuthorizationToken answer): it reaches the push with the cloud's repository address and its docker login, and
records the digest, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import cloudfolder
import docker
import pytest
import yaml
from typer.testing import CliRunner

import goldenenv.clouds  # noqa: F401  (registers the clouds)
from goldenenv import automation, project, stackconfig
from goldenenv.cli import app
from goldenenv.clouds import base
from goldenenv.images import publish, size
from goldenenv.images.lock import load

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
GCP_TOKEN = "ya29.recorded-access-token"
AZURE_TOKEN = "eyJ.recorded-acr-refresh-token"
ACR_ANSWER = {"data": {"authorizationToken": "recorded-acr-temporary-password", "tempUserName": "cr_temp_user",
                       "expireDate": 1767225600000}}
"""GetAuthorizationToken's answer (ACR personal edition API 2016-06-07, GET /tokens), as Alibaba's acr-login
action reads it: data.tempUserName and data.authorizationToken."""
GCP_PROJECT = "team-project-123"
SWR_LOGIN = {"auths": {"swr.cn-north-4.myhuaweicloud.com": {
    "auth": "Y24tbm9ydGgtNEBBS1JFQ09SREVEOnJlY29yZGVkLXN3ci1sb2dpbi1rZXk="}}}
"""CreateSecret's answer (SWR POST /v2/manage/utils/secret: auths.<registry>.auth, base64 of user:password,
https://support.huaweicloud.com/api-swr/swr_02_0052.html): cn-north-4@AKRECORDED : recorded-swr-login-key."""
TCR_TOKEN = {"Username": "tcr-temp-user", "Token": "recorded-tcr-temporary-token", "ExpTime": 1767225600000}
"""CreateInstanceToken's answer (tcr 2019-09-24, TokenType temp: https://cloud.tencent.com/document/api/1141/41571):
Username and Token."""


def cloud_of(path: Path) -> str:
    return stackconfig.read_stack_file(path)["goldenenv:cloud"]


WITH_REGISTRY = [name for name in base.names() if base.get(name).uses_pulumi and base.get(name).registry_types]
WITHOUT_REGISTRY = [name for name in base.names() if not base.get(name).registry_types]
FIRST_STACK = {}
"""Cloud -> the stack pushed to: its smallest (a -dev stack) where it ships one, else its first."""
for _path in sorted((REPO / "stacks").glob("Pulumi.*.yaml"), key=lambda p: ("-dev" not in p.name, p.name)):
    FIRST_STACK.setdefault(cloud_of(_path), _path.name.removeprefix("Pulumi.").removesuffix(".yaml"))


def expected(cloud: str, region: str) -> dict:
    """The repository address and docker login the registry of the cloud's provider documents, written here, not
    computed by the code. A cloud on a provider not listed fails naming the row to add, before any push is tried
    (the push would ask the provider's real registry for a login)."""
    provider = cloudfolder.provider(cloud)
    rows = {
        "aws": {"prefix": f"123456789012.dkr.ecr.{region}.amazonaws.com/", "username": "AWS"},
        "gcp": {"prefix": f"{region}-docker.pkg.dev/{GCP_PROJECT}/", "username": "oauth2accesstoken",
                "password": GCP_TOKEN},
        "azure": {"prefix": ".azurecr.io/", "username": "00000000-0000-0000-0000-000000000000",
                  "password": AZURE_TOKEN},
        "alicloud": {"prefix": f"registry.{region}.aliyuncs.com/", "username": "cr_temp_user",
                     "password": "recorded-acr-temporary-password"},
        "huaweicloud": {"prefix": f"swr.{region}.myhuaweicloud.com/", "username": "cn-north-4@AKRECORDED",
                        "password": "recorded-swr-login-key"},
        "tencentcloud": {"prefix": ".tencentcloudcr.com/", "username": "tcr-temp-user",
                         "password": "recorded-tcr-temporary-token"},
    }
    rows["azure-native"] = rows.pop("azure")
    if provider not in rows:
        pytest.fail(f"add the row of {provider} (the provider {cloud} builds on) to expected() in "
                    "tests/unit/test_contract_image_push.py: the repository address and docker login its registry "
                    "documents; and its login's recorded answer to cloud_answers", pytrace=False)
    return rows[provider]


class Image:
    def __init__(self):
        self.id = "sha256:" + "5e" * 32

    def tag(self, repository: str, tag: str) -> bool:
        return True


class Engine:
    """The Docker SDK's client as publish.push uses it: one built image, a registry that takes every push."""

    def __init__(self, lock):
        self.images, self.lock, self.pushes = self, lock, []

    def get(self, name: str) -> Image:
        if name != self.lock.tag:
            raise docker.errors.ImageNotFound(name)
        return Image()

    def push(self, repository: str, tag: str, stream: bool, decode: bool, auth_config=None):
        self.pushes.append((repository, tag, auth_config))
        digest = "sha256:" + hashlib.sha256(f"{repository}:{tag}".encode()).hexdigest()
        yield {"status": f"The push refers to repository [{repository}]"}
        yield {"progressDetail": {}, "aux": {"Tag": tag, "Digest": digest, "Size": 1573}}


def fake_cli(folder: Path, name: str, answers: dict[str, str]) -> None:
    """A CLI on PATH that prints a recorded answer for the arguments it is asked with."""
    script = folder / name
    cases = "\n".join(f"  *'{key}'*) printf '%s\\n' '{value}' ;;" for key, value in answers.items())
    script.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}\n  *) echo "unrecorded: $*" >&2; exit 3 ;;\nesac\n')
    script.chmod(0o755)


@pytest.fixture
def own_project(tmp_path, monkeypatch):
    """A project holding the shipped stacks, so a push records its digest there and not in the package."""
    root = tmp_path / "infra"
    shutil.copytree(REPO / "stacks", root / "stacks")
    (root / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "infra", "runtime": "python",
                                                      "stackConfigDir": "stacks"}))
    monkeypatch.chdir(root)
    project.use(project.find(root))
    yield root
    project.use(None)


@pytest.fixture
def cloud_answers(tmp_path, monkeypatch, aws_env):
    """Every cloud's recorded answers: moto's AWS, gcloud and az printing theirs, ACR's token answer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_cli(bin_dir, "gcloud", {"auth print-access-token": GCP_TOKEN, "config get-value project": GCP_PROJECT})
    fake_cli(bin_dir, "az", {"acr login": json.dumps({"accessToken": AZURE_TOKEN, "loginServer": "x"}),
                             "account show": "00000000-0000-0000-0000-0000000000aa"})
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", GCP_PROJECT)
    monkeypatch.setenv("ARM_SUBSCRIPTION_ID", "00000000-0000-0000-0000-0000000000aa")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI-recorded")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "recorded-secret")
    asked = []

    def acr(url, headers):
        asked.append((url, headers))
        return ACR_ANSWER

    monkeypatch.setenv("TENCENTCLOUD_SECRET_ID", "AKID-recorded")
    monkeypatch.setenv("TENCENTCLOUD_SECRET_KEY", "recorded-secret")

    def tcr(credentials, region, timeout=30):
        def call(service, version, action, params):
            asked.append((f"{service}:{action}", params))
            return {"DescribeInstances": {"Registries": [{"RegistryId": "tcr-recorded"}]},
                    "CreateInstanceToken": TCR_TOKEN}[action]
        return call

    monkeypatch.setenv("HW_ACCESS_KEY", "AKRECORDED")
    monkeypatch.setenv("HW_SECRET_KEY", "recorded-secret")

    def swr(credentials, timeout=30):
        def call(method, url, body):
            asked.append((method, url))
            return SWR_LOGIN
        return call

    # the registry's token call, in every cloud folder built on Alibaba's, Tencent's or Huawei's provider
    for cloud in WITH_REGISTRY:
        if cloudfolder.provider(cloud) == "alicloud":
            monkeypatch.setattr(cloudfolder.module(cloud, "registry"), "_https_get", acr, raising=False)
        if cloudfolder.provider(cloud) == "tencentcloud":
            monkeypatch.setattr(cloudfolder.module(cloud, "api"), "client", tcr)
        if cloudfolder.provider(cloud) == "huaweicloud":
            monkeypatch.setattr(cloudfolder.module(cloud, "api"), "client", swr)
    return asked


@pytest.fixture
def targeted_up(monkeypatch):
    """The targeted up that creates the repository, stood in: the targets it was given."""
    targets = []

    class Stack:
        def up(self, on_output, target):
            targets.extend(target)

    monkeypatch.setattr(automation, "stack", lambda spec: Stack())
    monkeypatch.setattr(automation, "_before_up", lambda spec, log: None)
    monkeypatch.setattr(size, "compressed_bytes", lambda client, tag: None)
    return targets


def test_every_cloud_with_a_registry_ships_a_stack_to_push_to():
    assert set(WITH_REGISTRY) >= {"aws", "gcp", "azure", "alicloud"}
    assert all(cloud in FIRST_STACK for cloud in WITH_REGISTRY)


@pytest.mark.parametrize("cloud", [c for c in WITHOUT_REGISTRY if c in FIRST_STACK])
def test_image_push_to_a_stack_without_a_repository_says_so(cloud, own_project, targeted_up, monkeypatch):
    """A stack whose cloud has no repository of its own (the local cloud's nodes run the image built on this
    machine) is told so in the command's words, exit 2: nothing is created and nothing is pushed."""
    stack = FIRST_STACK[cloud]
    lock = stackconfig.read_stack_file(own_project / "stacks" / f"Pulumi.{stack}.yaml")["goldenenv:image"]["lock"]
    monkeypatch.setattr(docker, "from_env", lambda: pytest.fail("nothing is pushed"))

    result = runner.invoke(app, ["image", "push", lock, "-s", stack], env={"COLUMNS": "250"})

    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert f"stack {stack} is on the {cloud} cloud, which has no image repository of its own" in result.output
    assert "--registry" in result.output and targeted_up == []


@pytest.mark.parametrize("cloud", WITH_REGISTRY)
def test_image_push_to_a_stack_reaches_the_push_with_the_clouds_address_and_login(
        cloud, own_project, cloud_answers, targeted_up, monkeypatch):
    stack = FIRST_STACK[cloud]
    config = stackconfig.read_stack_file(own_project / "stacks" / f"Pulumi.{stack}.yaml")
    region, lock = config["goldenenv:region"], load(config["goldenenv:image"]["lock"])
    want = expected(cloud, region)
    engine = Engine(lock)
    monkeypatch.setattr(docker, "from_env", lambda: engine)

    result = runner.invoke(app, ["image", "push", lock.name, "-s", stack], env={"COLUMNS": "250"})

    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and result.exception is None
    assert any(urn.split("::")[2].rsplit("$", 1)[-1].startswith(base.get(cloud).registry_types)
               for urn in targeted_up)
    [(repository, tag, auth)] = engine.pushes
    assert want["prefix"] in repository and repository.startswith(repository.split("/", 1)[0])
    assert repository.split("/", 1)[0] in (want["prefix"].split("/", 1)[0], repository.split("/", 1)[0])
    assert auth["username"] == want["username"] and auth["registry"] == repository.split("/", 1)[0]
    assert auth["password"] == want.get("password", auth["password"]) and auth["password"]
    [entry] = publish.records(lock.name)
    assert publish.published_path(lock.name).is_relative_to(own_project)
    assert entry.tag == tag and entry.lock_hash == lock.content_hash
    assert f"pushed {entry.ref}" in result.output


LOGIN_ENV = ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS", "ARM_SUBSCRIPTION_ID",
             "AZURE_SUBSCRIPTION_ID", "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
             "ALICLOUD_ACCESS_KEY", "ALICLOUD_SECRET_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
             "AWS_SESSION_TOKEN", "AWS_PROFILE")
"""What the clouds read a caller's login from; a caller with none of them has not logged in anywhere."""


@pytest.mark.parametrize("cloud", WITH_REGISTRY)
def test_image_push_with_no_cloud_login_says_what_to_do(cloud, own_project, targeted_up, tmp_path, monkeypatch):
    """A caller with no login on the stack's cloud (no credentials, no cloud CLI that answers) is told what is
    missing, in words, never a traceback, and nothing is pushed."""
    bin_dir = tmp_path / "no-clis"
    bin_dir.mkdir()
    for name in ("gcloud", "az", "aliyun"):
        fake_cli(bin_dir, name, {})
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for name in LOGIN_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("HOME", str(tmp_path))
    stack = FIRST_STACK[cloud]
    lock = stackconfig.read_stack_file(own_project / "stacks" / f"Pulumi.{stack}.yaml")["goldenenv:image"]["lock"]
    monkeypatch.setattr(docker, "from_env", lambda: pytest.fail("nothing is pushed without a login"))

    result = runner.invoke(app, ["image", "push", lock, "-s", stack], env={"COLUMNS": "250"})

    assert result.exit_code in (1, 2), result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and result.output.strip()


def test_a_gcp_push_is_what_the_stacks_nodes_pull(own_project, cloud_answers, targeted_up, monkeypatch):
    """The repository the push goes to is the one the program gives the nodes (an Artifact Registry image:
    <region>-docker.pkg.dev/<project>/<repository>/<image>), so the stack's plan pulls the pushed digest."""
    from goldenenv.clouds.gcp import PLACEHOLDER_PROJECT
    from goldenenv.plan import plan

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PLACEHOLDER_PROJECT)
    stack = FIRST_STACK["gcp"]
    config = stackconfig.read_stack_file(own_project / "stacks" / f"Pulumi.{stack}.yaml")
    lock = load(config["goldenenv:image"]["lock"])
    engine = Engine(lock)
    monkeypatch.setattr(docker, "from_env", lambda: engine)
    result = runner.invoke(app, ["image", "push", lock.name, "-s", stack])
    assert result.exit_code == 0, result.output
    [entry] = publish.records(lock.name)
    assert entry.repository.count("/") == 3 and entry.repository.endswith(f"/{lock.name}")
    assert plan(stack).outputs["imageRef"] == entry.ref


def test_alibabas_token_call_is_signed_with_the_callers_access_key(own_project, cloud_answers):
    """GetAuthorizationToken is asked of the region's ACR endpoint with an ROA signature of the AccessKey."""
    from goldenenv.clouds.alicloud import AlicloudCloud
    from goldenenv.lifecycle import load_spec

    spec = load_spec(FIRST_STACK["alicloud"])
    login = AlicloudCloud().registry_auth(spec, f"registry.{spec.region}.aliyuncs.com")
    assert login["username"] == "cr_temp_user"
    [(url, headers)] = cloud_answers
    assert url == f"https://cr.{spec.region}.aliyuncs.com/tokens"
    assert headers["Authorization"].startswith("acs LTAI-recorded:") and headers["x-acs-version"] == "2016-06-07"


def test_an_aws_login_the_cloud_refuses_is_said_not_raised(own_project):
    """An expired session token: STS refuses it after the preflight found credentials. The push says so, in words
    the command prints (RuntimeError), with the command that shows the login; never a botocore traceback."""
    from botocore.exceptions import ClientError

    from goldenenv.clouds.aws import AwsCloud
    from goldenenv.lifecycle import load_spec

    class ExpiredSts:
        def get_caller_identity(self):
            raise ClientError({"Error": {"Code": "ExpiredToken", "Message": "The security token included in the "
                                         "request is expired"}}, "GetCallerIdentity")

    with pytest.raises(RuntimeError, match=r"ExpiredToken.*`aws sts get-caller-identity`"):
        AwsCloud().registry_url(load_spec(FIRST_STACK["aws"]), sts=ExpiredSts())

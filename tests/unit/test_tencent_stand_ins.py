"""The Tencent stand-ins of the node-boot tests hold to their sources without an engine: the API stand-in accepts a
request signed by Tencent's own SDK (tencentcloud-sdk-python-common's TC3-HMAC-SHA256) and refuses a changed,
stale, unsigned-for or token-less one; CAM's evaluation of the plan's policy documents gives a node read of its
munge secret only; the metadata server answers an instance by its address, with its own role's keys only."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nodeboot"))

import tencent_apis  # noqa: E402
import tencent_metadata  # noqa: E402

SECRET_ID, SECRET_KEY, TOKEN = "AKIDemulated", "emulated-secret-key", "emulated-token"
NODE_POLICY = json.dumps({"version": "2.0", "statement": [
    {"effect": "allow", "action": ["name/ssm:GetSecretValue"],
     "resource": ["qcs::ssm:ap-guangzhou:uin/*:secret/goldenenv-sandbox-dev-munge"]},
    {"effect": "allow", "action": ["name/tcr:DescribeInstances"], "resource": ["*"]}]})
"""A node's policy as the plan writes it (goldenenv/clouds/tencent/privilege.py): read of its own secret."""


@pytest.fixture
def folder(tmp_path) -> Path:
    (tmp_path / "credentials.json").write_text(json.dumps({SECRET_ID: {
        "secret": SECRET_KEY, "token": TOKEN, "role": "node-role", "policies": [NODE_POLICY]}}))
    return tmp_path


def sdk_signed(action: str, params: dict, secret_key: str = SECRET_KEY, token: str | None = TOKEN):
    """The headers and body Tencent's SDK sends for `action` on CFS (the SDK service installed here)."""
    from tencentcloud.cfs.v20190719.cfs_client import CfsClient
    from tencentcloud.common import credential
    from tencentcloud.common.http.request import RequestInternal

    client = CfsClient(credential.Credential(SECRET_ID, secret_key, token), "ap-guangzhou")
    request = RequestInternal("cfs.tencentcloudapi.com", "POST", "/")
    request.header["Content-Type"] = "application/json"
    client._build_req_with_tc3_signature(action, params, request)
    return {k.lower(): v for k, v in request.header.items()}, request.data.encode()


def test_a_request_signed_by_tencents_sdk_is_accepted_and_tampering_is_refused(folder):
    headers, body = sdk_signed("DescribeCfsFileSystems", {"FileSystemId": "cfs-1"})
    assert tencent_apis.authenticate(str(folder), "cfs", headers, body)["role"] == "node-role"

    def refused(headers, body, service="cfs") -> str:
        with pytest.raises(tencent_apis.ApiError) as raised:
            tencent_apis.authenticate(str(folder), service, headers, body)
        return raised.value.code

    assert refused(headers, body.replace(b"cfs-1", b"cfs-2")) == "AuthFailure.SignatureFailure"
    assert refused(headers, body, service="ssm") == "AuthFailure.SignatureFailure", "signed for another service"
    assert refused({**headers, "x-tc-token": "another"}, body) == "AuthFailure.TokenFailure"
    assert refused({k: v for k, v in headers.items() if k != "x-tc-token"}, body) == "AuthFailure.TokenFailure"
    stale = {**headers, "x-tc-timestamp": str(int(time.time()) - 301)}
    assert refused(stale, body) == "AuthFailure.SignatureExpire"
    forged, forged_body = sdk_signed("DescribeCfsFileSystems", {}, secret_key="guessed")
    assert refused(forged, forged_body) == "AuthFailure.SignatureFailure"
    (folder / "credentials.json").write_text("{}")
    assert refused(headers, body) == "AuthFailure.SecretIdNotFound"


def test_cam_gives_the_node_read_of_its_own_secret_and_nothing_more():
    own = "qcs::ssm:ap-guangzhou:uin/100012345678:secret/goldenenv-sandbox-dev-munge"
    assert tencent_apis.cam_allows([NODE_POLICY], "name/ssm:GetSecretValue", own)
    assert not tencent_apis.cam_allows([NODE_POLICY], "name/ssm:PutSecretValue", own)
    assert not tencent_apis.cam_allows([NODE_POLICY], "name/ssm:GetSecretValue", own.replace("dev-munge", "prod"))
    deny = json.dumps({"version": "2.0", "statement": [
        {"effect": "deny", "action": ["name/ssm:*"], "resource": ["*"]}]})
    assert not tencent_apis.cam_allows([NODE_POLICY, deny], "name/ssm:GetSecretValue", own), "a deny wins"


def test_the_ssm_stand_in_keeps_versions_as_ssm_does(folder):
    tencent_apis.add_secret(folder, "ap-guangzhou", "s")
    writer = {"role": "head", "policies": [json.dumps({"version": "2.0", "statement": [
        {"effect": "allow", "action": ["name/ssm:*"], "resource": ["*"]}]})]}

    def call(action: str, **params) -> dict:
        return tencent_apis.ssm(str(folder), "ap-guangzhou", writer, action, {"SecretName": "s", **params})

    assert call("ListSecretVersionIds")["Versions"] == []
    with pytest.raises(tencent_apis.ApiError, match="does not exist") as missing:
        call("GetSecretValue", VersionId="munge")
    assert missing.value.code == "ResourceNotFound"
    call("PutSecretValue", VersionId="munge", SecretBinary="eA==")
    assert call("GetSecretValue", VersionId="munge")["SecretBinary"] == "eA=="
    with pytest.raises(tencent_apis.ApiError) as again:
        call("PutSecretValue", VersionId="munge", SecretBinary="eQ==")
    assert again.value.code == "ResourceInUse.VersionIdExists"
    with pytest.raises(tencent_apis.ApiError) as other:
        tencent_apis.ssm(str(folder), "ap-guangzhou", writer, "GetSecretValue", {"SecretName": "t"})
    assert other.value.code == "ResourceNotFound.SecretNotExist"


@pytest.fixture
def metadata(tmp_path):
    credentials = {"AccessKeyId": "AKID1", "AccessKeySecret": "key", "SecurityToken": "tok",
                   "Expiration": "2099-01-01T00:00:00Z"}
    tencent_metadata.write(tmp_path, {"127.0.0.1": tencent_metadata.instance(
        instance_id="ins-1", name="n", uuid="u", address="127.0.0.1", mac="52:54:00:00:00:01",
        region="ap-guangzhou", zone="ap-guangzhou-3", vpc_id="vpc-1", subnet_id="subnet-1", role="node-role",
        credentials=credentials)})
    server = tencent_metadata.serve(tmp_path, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}/latest/meta-data/"
    server.shutdown()
    server.server_close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def test_the_metadata_server_answers_the_instance_at_that_address_with_its_own_role_only(metadata):
    state, url = metadata
    assert get(url + "placement/zone") == (200, "ap-guangzhou-3")
    assert get(url + "instance-id") == (200, "ins-1")
    assert get(url + "cam/security-credentials/") == (200, "node-role")
    status, keys = get(url + "cam/security-credentials/node-role")
    assert status == 200 and {k: json.loads(keys)[k] for k in ("TmpSecretId", "TmpSecretKey", "Token", "Code")} == {
        "TmpSecretId": "AKID1", "TmpSecretKey": "key", "Token": "tok", "Code": "Success"}
    assert get(url + "cam/security-credentials/head-role")[0] == 404, "another role's keys: none"
    assert get(url + "no-such-entry")[0] == 404
    assert get(url + "spot/termination-time")[0] == 404, "no reclaim yet"
    tencent_metadata.set_termination(state, "127.0.0.1", "2026-12-07 18:00:00")
    assert get(url + "spot/termination-time") == (200, "2026-12-07 18:00:00")
    tencent_metadata.write(state, {})
    assert get(url + "instance-id")[0] == 404, "an address that is no instance of the stack"
    assert tencent_metadata.requests_of(state)[0] == ("127.0.0.1", "GET", "/latest/meta-data/placement/zone", 200)

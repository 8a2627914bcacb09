"""The Huawei stand-ins of the emulated boot (tests/nodeboot/huawei_apis.py, huawei_metadata.py) hold what Huawei holds,
checked in process without a host: a request huaweicloudsdkcore 3.1.219's own signer signs is accepted, the same
request with a changed path, another secret key, no token or a stale date is refused; IAM identity policies allow
only what they name (a Deny wins); the metadata service answers each instance only its own record, its agency's
keys in the shape the SDK reads, and refuses a token it never gave."""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nodeboot"))

import huawei_apis  # noqa: E402
import huawei_metadata  # noqa: E402

HOST = "kms.cn-north-4.myhuaweicloud.com"
PATH = "/v1/p1/secrets/munge/versions/latest"


def sdk_signed(when: datetime, secret: str = "SK", token: str | None = "TOKEN", path: str = PATH) -> dict[str, str]:
    """The headers huaweicloudsdkcore's Signer gives a GET of `path` with an agency's temporary keys (token None:
    signed as with permanent keys, no X-Security-Token)."""
    from huaweicloudsdkcore.auth.credentials import BasicCredentials
    from huaweicloudsdkcore.sdk_request import SdkRequest
    from huaweicloudsdkcore.signer.signer import Signer

    request = SdkRequest(method="GET", schema="https", host=HOST, resource_path=path, query_params=[],
                         header_params={"X-Sdk-Date": when.strftime("%Y%m%dT%H%M%SZ"), "Host": HOST,
                                        **({"X-Security-Token": token} if token else {})}, body="")
    signed = Signer(BasicCredentials("AK", secret)).sign(request).header_params
    return {k.lower(): v for k, v in signed.items()}


@pytest.fixture
def account(tmp_path) -> Path:
    (tmp_path / "credentials.json").write_text(json.dumps({"AK": {
        "secret": "SK", "token": "TOKEN", "role": "agency-a", "policies": []}}))
    return tmp_path


def authenticate(folder: Path, headers: dict[str, str], path: str = PATH) -> dict:
    return huawei_apis.authenticate(str(folder), "GET", path, "", headers, b"")


def test_a_request_the_sdk_signed_is_accepted(account):
    caller = authenticate(account, sdk_signed(datetime.now(timezone.utc)))
    assert caller["role"] == "agency-a"


@pytest.mark.parametrize("change, path", [
    (lambda h: h, "/v1/p1/secrets/another/versions/latest"),  # not the path signed
    (lambda h: {**h, "authorization": h["authorization"].replace("Access=AK", "Access=AKforged")}, PATH),  # unknown
    (lambda h: {k: v for k, v in h.items() if k != "x-security-token"}, PATH),  # a signed header gone
])
def test_a_request_that_is_not_the_signed_one_is_refused(account, change, path):
    with pytest.raises(huawei_apis.ApiError) as refused:
        authenticate(account, change(sdk_signed(datetime.now(timezone.utc))), path)
    assert (refused.value.status, refused.value.code) == (401, "APIG.0301")


def test_temporary_keys_signed_without_their_security_token_are_refused(account):
    with pytest.raises(huawei_apis.ApiError) as refused:
        authenticate(account, sdk_signed(datetime.now(timezone.utc), token=None))
    assert (refused.value.status, refused.value.code) == (401, "APIG.0303")


def test_another_secret_key_or_a_stale_date_is_refused(account):
    for headers in (sdk_signed(datetime.now(timezone.utc), secret="not-SK"),
                    sdk_signed(datetime.now(timezone.utc) - timedelta(minutes=20))):
        with pytest.raises(huawei_apis.ApiError) as refused:
            authenticate(account, headers)
        assert refused.value.code == "APIG.0301"


def test_iam_allows_only_what_a_policy_names_and_a_deny_wins():
    allow = json.dumps({"Version": "1.1", "Statement": [
        {"Effect": "Allow", "Action": ["csms:secretVersion:get"], "Resource": ["csms:*:*:secret:munge"]}]})
    deny = json.dumps({"Version": "1.1", "Statement": [
        {"Effect": "Deny", "Action": ["csms:*"], "Resource": ["*"]}]})
    conditional = json.dumps({"Version": "1.1", "Statement": [
        {"Effect": "Allow", "Action": ["csms:secretVersion:create"], "Resource": ["*"],
         "Condition": {"StringEquals": {"g:ResourceTag/x": ["y"]}}}]})
    resource = "csms:cn-north-4:acct:secret:munge"
    assert huawei_apis.iam_allows([allow], "csms:secretVersion:get", resource)
    assert not huawei_apis.iam_allows([allow], "csms:secretVersion:create", resource)
    assert not huawei_apis.iam_allows([allow], "csms:secretVersion:get", "csms:cn-north-4:acct:secret:other")
    assert not huawei_apis.iam_allows([allow, deny], "csms:secretVersion:get", resource)
    assert not huawei_apis.iam_allows([conditional], "csms:secretVersion:create", resource)


def test_the_metadata_service_answers_each_instance_its_own_record(tmp_path):
    credentials = {"AccessKeyId": "AK", "AccessKeySecret": "SK", "SecurityToken": "TOKEN",
                   "Expiration": "2099-01-01T00:00:00Z"}
    mine = huawei_metadata.instance(
        uuid="uuid-1", name="n", hostname="gpu-0", zone="cn-north-4a", region="cn-north-4", project_id="p1",
        flavor="pi2.2xlarge.4", address="127.0.0.1", public_keys={}, user_data=b"#cloud-config\n",
        agency="agency-a", credentials=credentials)
    huawei_metadata.write(tmp_path, {"127.0.0.1": mine})
    server = huawei_metadata.serve(tmp_path, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def get(path: str, headers: dict | None = None, method: str = "GET") -> tuple[int, str]:
        try:
            with urllib.request.urlopen(urllib.request.Request(base + path, headers=headers or {},
                                                               method=method)) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    try:
        assert json.loads(get("/openstack/latest/meta_data.json")[1])["uuid"] == "uuid-1"
        assert get("/openstack/latest/user_data") == (200, "#cloud-config\n")
        status, token = get("/meta-data/latest/api/token", {"X-Metadata-Token-Ttl-Seconds": "300"}, "PUT")
        assert status == 200
        key = json.loads(get("/openstack/latest/securitykey", {"X-Metadata-Token": token})[1])["credential"]
        assert (key["access"], key["secret"], key["securitytoken"]) == ("AK", "SK", "TOKEN")
        assert get("/openstack/latest/meta_data.json", {"X-Metadata-Token": "never-given"})[0] == 401
        assert get("/latest/meta-data/placement/availability-zone") == (200, "cn-north-4a")
        huawei_metadata.write(tmp_path, {"127.0.0.1": {**mine, "agency": None}})
        assert get("/openstack/latest/securitykey") == (401, huawei_metadata.NO_AGENCY), "no agency, no keys"
        huawei_metadata.write(tmp_path, {"10.0.0.9": mine})
        assert get("/openstack/latest/meta_data.json")[0] == 404, "another address's record is not served"
    finally:
        server.shutdown()

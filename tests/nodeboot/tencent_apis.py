"""Tencent Cloud's API 3.0 as an emulated Tencent host calls it, for SSM (the munge key's secret) and TCR (the
registry's temporary login): served by tests/nodeboot/cloud_apis.py over TLS for every <service>.tencentcloudapi.com
(each stack's network resolves those names to it), what the tests register kept in STATE_FOLDER/tencent.json.

What it checks, and its sources:

- Signature v3, TC3-HMAC-SHA256 ("Signature v3", https://www.tencentcloud.com/document/api/213/33224, and
  tencentcloud-sdk-python 3.1.195 common/sign.py): POST / with Content-Type application/json, the X-TC-Action,
  X-TC-Version, X-TC-Timestamp, X-TC-Region headers and, for a role's temporary keys, X-TC-Token; Authorization
  `TC3-HMAC-SHA256 Credential=<SecretId>/<date>/<service>/tc3_request, SignedHeaders=..., Signature=...` over the
  canonical request (method, /, empty query, the signed headers, the payload's SHA-256), the key derived from
  "TC3" + SecretKey through the date, the service and "tc3_request". A key the emulated STS did not issue, a wrong
  signature, a missing or wrong token, or a timestamp more than 5 minutes off is refused with the common error
  codes AuthFailure.SecretIdNotFound, AuthFailure.SignatureFailure, AuthFailure.TokenFailure and
  AuthFailure.SignatureExpire (their names from the API's common error codes; the wording here is this stand-in's).
- CAM: the caller's role's policy documents (the plan's, version 2.0) must allow `name/<service>:<Action>` on the
  resource's six-segment name (qcs::ssm:<region>:uin/<uin>:secret/<name>, qcs::tcr:<region>:uin/<uin>:instance/<id>;
  "*" for a listing), wildcards * and ?; an explicit deny wins. Refused: UnauthorizedOperation (HTTP 200 with the
  error in Response, as every API 3.0 error).
- SSM 2019-09-23 (tencentcloud-sdk-python-ssm 3.1.194 models and errorcodes): GetSecretValue {SecretName,
  VersionId} -> {SecretName, VersionId, SecretBinary, SecretString}; ListSecretVersionIds {SecretName} ->
  {SecretName, Versions: [{VersionId, CreateTime}]}; PutSecretValue {SecretName, VersionId, SecretBinary |
  SecretString} -> {SecretName, VersionId}. A secret the account does not have: ResourceNotFound.SecretNotExist; a
  version it does not have: ResourceNotFound; a version again: ResourceInUse.VersionIdExists.
- TCR 2019-09-24 (tencentcloud-sdk-python-tcr 3.1.189): DescribeInstances {Filters: [{Name: RegistryName, Values}]}
  -> {TotalCount, Registries: [{RegistryId, RegistryName, PublicDomain, ...}]}; CreateInstanceToken {RegistryId,
  TokenType: temp} -> {Username, Token, ExpTime, TokenId} (a one-hour token, "CreateInstanceToken",
  https://cloud.tencent.com/document/api/1141/41571); an unknown registry: ResourceNotFound. The token is recorded
  with the role that asked, for the registry stand-in to check (tokens_of).

Every call is appended to STATE_FOLDER/tencent.log as `<service> <Action> <role or -> <error code or OK>`.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
import uuid

STATE_FILE = "tencent.json"
LOG = "tencent.log"
SUFFIX = ".tencentcloudapi.com"
UIN = "100012345678"
"""The emulated account's UIN (the six-segment names' uin/...)."""
SKEW_S = 300
VERSIONS = {"ssm": "2019-09-23", "tcr": "2019-09-24"}
TOKEN_LIFETIME_S = 3600
_LOCK = threading.Lock()


class ApiError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _read(folder: str, name: str) -> dict:
    try:
        with open(os.path.join(folder, name)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _update(folder: str, change) -> None:
    with _LOCK:
        data = _read(folder, STATE_FILE)
        data.setdefault("secrets", {})
        data.setdefault("registries", {})
        data.setdefault("tokens", {})
        change(data)
        with open(os.path.join(folder, STATE_FILE + ".new"), "w") as f:
            json.dump(data, f)
        os.replace(os.path.join(folder, STATE_FILE + ".new"), os.path.join(folder, STATE_FILE))


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value] if value is not None else []


def cam_allows(policies: list[str], action: str, resource: str) -> bool:
    """CAM's evaluation of version 2.0 documents: a matching deny wins, else some allow must match."""
    allowed = False
    for document in policies:
        for statement in json.loads(document).get("statement", []):
            if not any(fnmatch.fnmatchcase(action, a) for a in _as_list(statement.get("action"))):
                continue
            if not any(fnmatch.fnmatchcase(resource, r) for r in _as_list(statement.get("resource"))):
                continue
            if statement.get("effect") == "deny":
                return False
            allowed = allowed or (statement.get("effect") == "allow" and not statement.get("condition"))
    return allowed


def signature(secret_key: str, service: str, timestamp: int, headers: dict[str, str], signed: list[str],
              payload: bytes) -> str:
    """TC3-HMAC-SHA256 over a POST to / (headers: lower-case name -> value)."""
    canonical = "\n".join(["POST", "/", "", "".join(f"{h}:{headers.get(h, '').strip().lower()}\n" for h in signed),
                           ";".join(signed), hashlib.sha256(payload).hexdigest()])
    day = datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).strftime("%Y-%m-%d")
    scope = f"{day}/{service}/tc3_request"
    to_sign = f"TC3-HMAC-SHA256\n{timestamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = ("TC3" + secret_key).encode()
    for part in (day, service, "tc3_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def authenticate(folder: str, service: str, headers: dict[str, str], payload: bytes) -> dict:
    """The caller's credentials entry (emulated_cloud.CloudApis.issue's), once the request's signature holds."""
    fields = dict(part.strip().split("=", 1) for part in
                  headers.get("authorization", "").removeprefix("TC3-HMAC-SHA256 ").split(",") if "=" in part)
    credential = fields.get("Credential", "").split("/")
    if not headers.get("authorization", "").startswith("TC3-HMAC-SHA256 ") or len(credential) != 4:
        raise ApiError("AuthFailure.SignatureFailure", "The provided credentials could not be validated.")
    try:
        timestamp = int(headers.get("x-tc-timestamp", ""))
    except ValueError:
        raise ApiError("AuthFailure.SignatureFailure", "X-TC-Timestamp is not a Unix time.")
    if abs(time.time() - timestamp) > SKEW_S:
        raise ApiError("AuthFailure.SignatureExpire", "The request's timestamp is more than 5 minutes off.")
    caller = _read(folder, "credentials.json").get(credential[0])
    if caller is None:
        raise ApiError("AuthFailure.SecretIdNotFound", "The SecretId is not found.")
    if credential[2] != service or credential[3] != "tc3_request":
        raise ApiError("AuthFailure.SignatureFailure", "The credential scope names another service.")
    expected = signature(caller["secret"], service, timestamp, headers, fields.get("SignedHeaders", "").split(";"),
                         payload)
    if "content-type" not in fields.get("SignedHeaders", "") or "host" not in fields.get("SignedHeaders", "") or \
            not hmac.compare_digest(expected, fields.get("Signature", "")):
        raise ApiError("AuthFailure.SignatureFailure", "The provided credentials could not be validated.")
    if caller.get("token") and headers.get("x-tc-token") != caller["token"]:
        raise ApiError("AuthFailure.TokenFailure", "The temporary key's token is missing or wrong.")
    return caller


def authorize(caller: dict, action: str, resource: str) -> None:
    if not cam_allows(caller.get("policies", []), action, resource):
        raise ApiError("UnauthorizedOperation", f"CAM denied {action} on {resource}.")


def ssm(folder: str, region: str, caller: dict, action: str, params: dict) -> dict:
    name = params.get("SecretName") or ""
    authorize(caller, f"name/ssm:{action}", f"qcs::ssm:{region}:uin/{UIN}:secret/{name}")
    key = f"{region}/{name}"
    if key not in _read(folder, STATE_FILE).get("secrets", {}):
        raise ApiError("ResourceNotFound.SecretNotExist", f"secret {name} does not exist")
    answer: dict = {}

    def change(data: dict) -> None:
        versions = data["secrets"][key]["versions"]
        if action == "GetSecretValue":
            found = versions.get(params.get("VersionId") or "")
            if found is None:
                raise ApiError("ResourceNotFound", f"version {params.get('VersionId')} of {name} does not exist")
            answer.update({"SecretName": name, "VersionId": params["VersionId"],
                           "SecretBinary": found.get("SecretBinary", ""),
                           "SecretString": found.get("SecretString", "")})
        elif action == "ListSecretVersionIds":
            answer.update({"SecretName": name, "Versions": [
                {"VersionId": k, "CreateTime": v["created"]} for k, v in versions.items()]})
        elif action == "PutSecretValue":
            version = params.get("VersionId") or ""
            if not version or not (params.get("SecretBinary") or params.get("SecretString")):
                raise ApiError("MissingParameter", "VersionId and SecretBinary or SecretString are required.")
            if version in versions:
                raise ApiError("ResourceInUse.VersionIdExists", f"version {version} of {name} exists")
            versions[version] = {k: params[k] for k in ("SecretBinary", "SecretString") if params.get(k)}
            versions[version]["created"] = int(time.time())
            answer.update({"SecretName": name, "VersionId": version})
        else:
            raise ApiError("InvalidAction", f"ssm has no action {action}")

    _update(folder, change)
    return answer


def tcr(folder: str, region: str, caller: dict, action: str, params: dict) -> dict:
    registries = _read(folder, STATE_FILE).get("registries", {})
    if action == "DescribeInstances":
        authorize(caller, "name/tcr:DescribeInstances", "*")
        names = [v for f in params.get("Filters") or [] if f.get("Name") == "RegistryName" for v in f["Values"]]
        found = [r for r in registries.values()
                 if r["RegionName"] == region and (not names or r["RegistryName"] in names)]
        return {"TotalCount": len(found), "Registries": found}
    if action == "CreateInstanceToken":
        registry = params.get("RegistryId") or ""
        authorize(caller, "name/tcr:CreateInstanceToken", f"qcs::tcr:{region}:uin/{UIN}:instance/{registry}")
        if registry not in registries:
            raise ApiError("ResourceNotFound", f"registry {registry} does not exist")
        token, token_id = secrets.token_urlsafe(32), "tk-" + uuid.uuid4().hex[:12]
        expires = int(time.time()) + TOKEN_LIFETIME_S
        _update(folder, lambda data: data["tokens"].update({token: {
            "registry": registry, "username": UIN, "role": caller.get("role"), "expires": expires}}))
        return {"Username": UIN, "Token": token, "ExpTime": expires * 1000, "TokenId": token_id}
    raise ApiError("InvalidAction", f"tcr has no action {action}")


SERVICES = {"ssm": ssm, "tcr": tcr}


def app(folder: str):
    """The API as a WSGI application (werkzeug, as cloud_apis.py serves the others)."""
    from werkzeug.wrappers import Request, Response

    def tencent(environ, start_response):
        request = Request(environ)
        service = request.host.split(":")[0].removesuffix(SUFFIX)
        headers = {k.lower(): v for k, v in request.headers.items()}
        action, role = headers.get("x-tc-action", ""), "-"
        try:
            if service not in SERVICES or environ.get("wsgi.url_scheme") != "https" or request.method != "POST":
                raise ApiError("InvalidParameter", f"{request.host}: no such API endpoint (POST over HTTPS only)")
            payload = request.get_data()
            caller = authenticate(folder, service, headers, payload)
            role = caller.get("role") or "the-account"
            if headers.get("x-tc-version") != VERSIONS[service]:
                raise ApiError("InvalidParameter", f"{service} has no version {headers.get('x-tc-version')}")
            answer = SERVICES[service](folder, headers.get("x-tc-region", ""), caller, action,
                                       json.loads(payload or b"{}"))
            outcome = "OK"
        except ApiError as e:
            answer, outcome = {"Error": {"Code": e.code, "Message": e.message}}, e.code
        with _LOCK, open(os.path.join(folder, LOG), "a") as f:
            f.write(f"{service} {action or '-'} {role} {outcome}\n")
        print(f"tencent {service} {action} by {role}: {outcome}", flush=True)
        body = json.dumps({"Response": {**answer, "RequestId": str(uuid.uuid4())}})
        return Response(body, status=200, content_type="application/json")(environ, start_response)

    return tencent


# the test's side: what the account has, and what was asked

def add_secret(folder, region: str, name: str) -> None:
    """A secret the account has (created by the plan's ssm.Secret), with no version yet."""
    _update(str(folder), lambda data: data["secrets"].setdefault(f"{region}/{name}", {"versions": {}}))


def add_registry(folder, region: str, registry_id: str, name: str) -> None:
    """A TCR instance the account has: its public domain <name>.tencentcloudcr.com."""
    _update(str(folder), lambda data: data["registries"].update({registry_id: {
        "RegistryId": registry_id, "RegistryName": name, "RegistryType": "basic", "Status": "Running",
        "PublicDomain": f"{name}.tencentcloudcr.com", "RegionName": region, "EnableAnonymous": False,
        "TokenValidTime": TOKEN_LIFETIME_S}}))


def secret_versions(folder, region: str, name: str) -> dict[str, dict]:
    return _read(str(folder), STATE_FILE)["secrets"][f"{region}/{name}"]["versions"]


def policies_of(folder, role: str) -> list[str]:
    """The policy documents of every credential issued for ``role`` (what its instance's metadata server hands out)."""
    return [d for entry in _read(str(folder), "credentials.json").values() if entry.get("role") == role
            for d in entry.get("policies") or []]


def tokens_of(folder) -> dict[str, dict]:
    """Token -> {registry, username, role, expires} of every temporary login issued."""
    return _read(str(folder), STATE_FILE).get("tokens", {})


def calls_of(folder) -> list[tuple[str, str, str, str]]:
    """(service, action, role or the-account or -, error code or OK) of every call so far."""
    try:
        with open(os.path.join(str(folder), LOG)) as f:
            return [tuple(line.split()) for line in f.read().splitlines()]
    except FileNotFoundError:
        return []

"""Huawei Cloud's APIs as an emulated Huawei host calls them at first boot, for DEW's CSMS (the munge key's secret)
and SWR (the registry's temporary login): served by tests/nodeboot/cloud_apis.py over TLS for every
<service>.<region>.myhuaweicloud.com (each stack's network resolves those names to it), what the tests register
kept in STATE_FOLDER/huawei.json.

What it checks, and its sources:

- The signature, SDK-HMAC-SHA256 (huaweicloudsdkcore 3.1.219 signer/signer.py, the signer Huawei's SDKs use;
  https://support.huaweicloud.com/intl/en-us/devg-apisign/api-sign-algorithm.html): the canonical request is the
  method, the path with every segment URL-encoded and a trailing /, the query's key=value pairs sorted, the signed
  headers (lower-case name:value lines), their names joined by ;, and the body's SHA-256; the string to sign is
  "SDK-HMAC-SHA256\\n<X-Sdk-Date>\\n<SHA-256 of the canonical request>", the signature its HMAC-SHA256 under the
  secret key. Authorization: `SDK-HMAC-SHA256 Access=<AK>, SignedHeaders=<names>, Signature=<hex>`. A key the
  emulated cloud never issued, a wrong signature, an X-Sdk-Date more than 15 minutes off, or an agency's temporary
  key without its X-Security-Token (signed) is refused with HTTP 401 (error codes APIG.0301 / APIG.0303 as Huawei's
  API gateway names an authentication failure; their wording here is this stand-in's, and the 15 minutes are
  unverified).
- IAM identity policies (version 1.1, https://support.huaweicloud.com/intl/en-us/usermanual-iam/iam_01_0017.html):
  the caller's agency's policies (the plan's custom policies, as the emulated STS issued them with its keys) must
  allow the action on the resource, `service:type:action` and `service:region:account:type:name` with * and ?
  wildcards; an explicit Deny wins; a statement with a Condition is not taken as an allow (the stand-in does not
  evaluate conditions). Refused: HTTP 403 (the service's error code `<SERVICE>.0403`, this stand-in's).
- CSMS (huaweicloudsdkcsms 3.1.219 ShowSecretVersion, CreateSecretVersion): GET
  /v1/{project_id}/secrets/{name}/versions/{version_id | latest} -> {"version": {"version_metadata": {id,
  secret_name, create_time, version_stages}, "secret_string" | "secret_binary"}}, action csms:secretVersion:get;
  POST /v1/{project_id}/secrets/{name}/versions {"secret_binary" | "secret_string"} -> {"version_metadata"}, a new
  version v<n+1> that becomes latest, action csms:secretVersion:create. Resource csms:<region>:<account>:secret:
  <name>. A secret the account lacks: 404 CSMS.0404 (code unverified).
- SWR CreateSecret (https://support.huaweicloud.com/api-swr/swr_02_0052.html): POST
  /v2/manage/utils/secret?projectname=<region> -> {"auths": {"swr.<region>.myhuaweicloud.com": {"auth":
  base64("<region>@<AK>:<password>")}}}, action swr::createLoginSecret on "*". The login is recorded with the
  agency that asked and lasts six hours (unverified), for the registry stand-in to check (logins_of). The API host
  swr-api.<region>.myhuaweicloud.com is the program's, unverified.

Every call is appended to STATE_FOLDER/huawei.log as `<service> <action> <agency or -> <error code or OK>`.
"""

from __future__ import annotations

import base64
import datetime
import fnmatch
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
import urllib.parse

STATE_FILE = "huawei.json"
LOG = "huawei.log"
SUFFIX = ".myhuaweicloud.com"
ACCOUNT = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
"""The emulated account's domain id (resources' account segment)."""
SKEW_S = 15 * 60
LOGIN_LIFETIME_S = 6 * 3600
ALGORITHM = "SDK-HMAC-SHA256"
_LOCK = threading.Lock()


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _read(folder: str, name: str) -> dict:
    try:
        with open(os.path.join(folder, name)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _update(folder: str, change) -> None:
    with _LOCK:
        data = _read(folder, STATE_FILE)
        for key in ("secrets", "logins"):
            data.setdefault(key, {})
        change(data)
        with open(os.path.join(folder, STATE_FILE + ".new"), "w") as f:
            json.dump(data, f)
        os.replace(os.path.join(folder, STATE_FILE + ".new"), os.path.join(folder, STATE_FILE))


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value] if value is not None else []


def iam_allows(policies: list[str], action: str, resource: str) -> bool:
    """IAM's evaluation of version 1.1 identity policies: a matching Deny wins, else some Allow must match."""
    allowed = False
    for document in policies:
        for statement in json.loads(document).get("Statement", []):
            if not any(fnmatch.fnmatchcase(action, a) for a in _as_list(statement.get("Action"))):
                continue
            if not any(fnmatch.fnmatchcase(resource, r) for r in _as_list(statement.get("Resource", "*"))):
                continue
            if statement.get("Effect") == "Deny":
                return False
            allowed = allowed or (statement.get("Effect") == "Allow" and not statement.get("Condition"))
    return allowed


def canonical_request(method: str, path: str, query: str, headers: dict[str, str], signed: list[str],
                      body: bytes) -> str:
    """The SDK's canonical request (headers: lower-case name -> value)."""
    uri = "/".join(urllib.parse.quote(part, safe="~") for part in urllib.parse.unquote(path).split("/"))
    uri = uri if uri.endswith("/") else uri + "/"
    pairs = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
    query = "&".join(f"{urllib.parse.quote(k, safe='~')}={urllib.parse.quote(v, safe='~')}" for k, v in pairs)
    lines = "".join(f"{h}:{headers.get(h, '').strip()}\n" for h in signed)
    return "\n".join([method.upper(), uri, query, lines, ";".join(signed), hashlib.sha256(body).hexdigest()])


def signature(secret_key: str, date: str, canonical: str) -> str:
    to_sign = f"{ALGORITHM}\n{date}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    return hmac.new(secret_key.encode(), to_sign.encode(), hashlib.sha256).hexdigest()


def authenticate(folder: str, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> dict:
    """The caller's credentials entry (emulated_cloud.CloudApis.issue's), once the request's signature holds."""
    given = headers.get("authorization", "")
    if not given.startswith(ALGORITHM + " "):
        raise ApiError(401, "APIG.0301", "Incorrect IAM authentication information: no SDK-HMAC-SHA256 signature.")
    fields = dict(part.strip().split("=", 1) for part in given[len(ALGORITHM) + 1:].split(",") if "=" in part)
    date = headers.get("x-sdk-date", "")
    try:
        moment = datetime.datetime.strptime(date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        raise ApiError(401, "APIG.0301", "Incorrect IAM authentication information: X-Sdk-Date is not a time.")
    if abs(time.time() - moment.timestamp()) > SKEW_S:
        raise ApiError(401, "APIG.0301", "Incorrect IAM authentication information: the request has expired.")
    caller = _read(folder, "credentials.json").get(fields.get("Access", ""))
    if caller is None:
        raise ApiError(401, "APIG.0301", "Incorrect IAM authentication information: unknown access key.")
    signed = [h for h in fields.get("SignedHeaders", "").split(";") if h]
    if "host" not in signed or "x-sdk-date" not in signed:
        raise ApiError(401, "APIG.0301", "Incorrect IAM authentication information: host and x-sdk-date unsigned.")
    expected = signature(caller["secret"], date, canonical_request(method, path, query, headers, signed, body))
    if not hmac.compare_digest(expected, fields.get("Signature", "")):
        raise ApiError(401, "APIG.0301", "Incorrect IAM authentication information: verify aksk signature fail.")
    if caller.get("token") and (headers.get("x-security-token") != caller["token"]
                                or "x-security-token" not in signed):
        raise ApiError(401, "APIG.0303", "Incorrect IAM authentication information: the security token is "
                                         "missing, unsigned or wrong.")
    return caller


def authorize(service: str, caller: dict, action: str, resource: str) -> None:
    if not iam_allows(caller.get("policies") or [], action, resource):
        raise ApiError(403, f"{service.upper()}.0403", f"IAM denied {action} on {resource}.")


def csms(folder: str, region: str, caller: dict, method: str, path: str, body: bytes) -> tuple[str, dict]:
    parts = path.strip("/").split("/")
    if len(parts) < 5 or parts[0] != "v1" or parts[2] != "secrets" or parts[4] != "versions":
        raise ApiError(404, "CSMS.0404", f"no such CSMS path {path}")
    name = parts[3]
    resource = f"csms:{region}:{ACCOUNT}:secret:{name}"
    key = f"{region}/{name}"
    if method == "GET" and len(parts) == 6:
        authorize("csms", caller, "csms:secretVersion:get", resource)
        secret = _read(folder, STATE_FILE).get("secrets", {}).get(key)
        if secret is None:
            raise ApiError(404, "CSMS.0404", f"The secret {name} does not exist.")
        version = parts[5] if parts[5] != "latest" else f"v{len(secret['versions'])}"
        if version not in secret["versions"]:
            raise ApiError(404, "CSMS.0404", f"The secret {name} has no version {parts[5]}.")
        return "ShowSecretVersion", {"version": secret["versions"][version]}
    if method == "POST" and len(parts) == 5:
        authorize("csms", caller, "csms:secretVersion:create", resource)
        given = json.loads(body or b"{}")
        if ("secret_binary" in given) == ("secret_string" in given):
            raise ApiError(400, "CSMS.0401", "give one of secret_binary and secret_string")
        made = {}

        def add(data: dict) -> None:
            secret = data["secrets"].get(key)
            if secret is None:
                raise ApiError(404, "CSMS.0404", f"The secret {name} does not exist.")
            version = f"v{len(secret['versions']) + 1}"
            made.update(metadata(name, version))
            secret["versions"][version] = {"version_metadata": dict(made), **{
                k: given[k] for k in ("secret_binary", "secret_string") if k in given}}

        _update(folder, add)
        return "CreateSecretVersion", {"version_metadata": made}
    raise ApiError(404, "CSMS.0404", f"no such CSMS call {method} {path}")


def metadata(name: str, version: str) -> dict:
    return {"id": version, "secret_name": name, "create_time": int(time.time() * 1000),
            "version_stages": ["SYSCURRENT"]}


def swr(folder: str, region: str, caller: dict, method: str, path: str, query: str) -> tuple[str, dict]:
    if method != "POST" or path.rstrip("/") != "/v2/manage/utils/secret":
        raise ApiError(404, "SVCSTG.SWR.4040000", f"no such SWR call {method} {path}")
    authorize("swr", caller, "swr::createLoginSecret", "*")
    project = dict(urllib.parse.parse_qsl(query)).get("projectname", region)
    user, password = f"{project}@{caller['access_key']}", secrets.token_hex(32)
    registry = f"swr.{project}{SUFFIX}"
    _update(folder, lambda data: data["logins"].update({password: {
        "registry": registry, "username": user, "agency": caller.get("role"),
        "expires": time.time() + LOGIN_LIFETIME_S}}))
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    return "CreateSecret", {"auths": {registry: {"auth": auth}}}


def app(folder: str):
    """The APIs as a WSGI application (werkzeug, as cloud_apis.py serves the others)."""
    from werkzeug.wrappers import Request, Response

    def huawei(environ, start_response):
        request = Request(environ)
        host = request.host.split(":")[0]
        service, _, rest = host.removesuffix(SUFFIX).partition(".")
        region = rest
        headers = {k.lower(): v for k, v in request.headers.items()}
        headers["host"] = host
        path, query = environ.get("PATH_INFO", "/"), environ.get("QUERY_STRING", "")
        action, agency = "-", "-"
        try:
            if environ.get("wsgi.url_scheme") != "https" or service not in ("kms", "swr-api"):
                raise ApiError(404, "APIG.0101", f"{host}: no such API endpoint (HTTPS only)")
            body = request.get_data()
            caller = authenticate(folder, request.method, path, query, headers, body)
            caller = {**caller, "access_key": headers["authorization"].split("Access=", 1)[1].split(",", 1)[0]}
            agency = caller.get("role") or "the-account"
            if service == "kms":
                action, answer = csms(folder, region, caller, request.method, path, body)
            else:
                action, answer = swr(folder, region, caller, request.method, path, query)
            status, outcome = 200, "OK"
        except ApiError as e:
            answer, status, outcome = {"error_code": e.code, "error_msg": e.message}, e.status, e.code
        with _LOCK, open(os.path.join(folder, LOG), "a") as f:
            f.write(f"{service} {action} {agency} {outcome}\n")
        print(f"huawei {service} {action} by {agency}: {outcome}", flush=True)
        return Response(json.dumps(answer), status=status, content_type="application/json")(environ, start_response)

    return huawei


# the test's side: what the account has, and what was asked

def add_secret(folder, region: str, name: str, text: str) -> None:
    """A CSMS secret the account has (created by the plan's dew.Secret), its first version holding `text`."""
    _update(str(folder), lambda data: data["secrets"].setdefault(f"{region}/{name}", {"versions": {
        "v1": {"version_metadata": metadata(name, "v1"), "secret_string": text}}}))


def secret_versions(folder, region: str, name: str) -> dict[str, dict]:
    return _read(str(folder), STATE_FILE)["secrets"][f"{region}/{name}"]["versions"]


def policies_of(folder, agency: str) -> list[str]:
    """The policy documents of every credential issued for `agency` (what its host's metadata hands out)."""
    return [d for entry in _read(str(folder), "credentials.json").values() if entry.get("role") == agency
            for d in entry.get("policies") or []]


def logins_of(folder) -> dict[str, dict]:
    """Password -> {registry, username, agency, expires} of every temporary login issued."""
    return _read(str(folder), STATE_FILE).get("logins", {})


def calls_of(folder) -> list[tuple[str, str, str, str]]:
    """(service, action, agency or the-account or -, error code or OK) of every call so far."""
    try:
        with open(os.path.join(str(folder), LOG)) as f:
            return [tuple(line.split()) for line in f.read().splitlines()]
    except FileNotFoundError:
        return []

"""The cloud APIs an emulated host calls by name, over TLS, each behaving as its public reference says. One process, in
a container on every stack's network, whose aliases there are the endpoints' names (the VPC's DNS); started by
tests/nodeboot/emulated_cloud.py with the venv's Python:

    python cloud_apis.py STATE_FOLDER

- AWS: moto in server mode (Secrets Manager, KMS and every other backend it has). Hosts reach it over TLS at the
  region's endpoint, e.g. https://secretsmanager.us-east-1.amazonaws.com, with the AWS CLI as it is; the deployer
  (the tests, creating what the Pulumi provider would) uses moto's plain server port, PLAIN_PORT.
- Alibaba Cloud, RPC style: KMS's secrets API (CreateSecret, PutSecretValue, GetSecretValue, ListSecretVersionIds)
  and NAS's DescribeProtocolMountTarget. Every call must carry credentials the emulated STS issued (for a RAM
  role: a host's metadata server hands them out; for the deployer), a SignatureNonce not used before, a Timestamp
  within 15 minutes and a valid signature (version 1.0, HMAC-SHA1 over the method and the sorted parameters); then
  the role's RAM policies (the plan's documents) must allow the action on the resource's ARN. Failures answer with
  the API's error codes.
- Google Cloud: Secret Manager's REST API (v1) at https://secretmanager.googleapis.com, bearer tokens the
  metadata server handed out and IAM on the secret (tests/nodeboot/gcp_apis.py; what the tests register:
  STATE_FOLDER/gcp.json).
- Tencent Cloud, API 3.0: SSM's secrets and TCR's temporary login at <service>.tencentcloudapi.com, signed with
  TC3-HMAC-SHA256 by the credentials the emulated STS issued and checked against the role's CAM policies
  (tests/nodeboot/tencent_apis.py; STATE_FOLDER/tencent.json).
- Huawei Cloud: DEW's CSMS secrets and SWR's temporary login at <service>.<region>.myhuaweicloud.com, signed with
  SDK-HMAC-SHA256 by the agency credentials the emulated STS issued and checked against the agency's IAM policies
  (tests/nodeboot/huawei_apis.py; STATE_FOLDER/huawei.json).

TLS: a certificate for the name the client asks for (SNI), made at the handshake and signed by the run's CA
(STATE_FOLDER/ca.pem, ca.key), which the hosts trust. What the tests register is read from STATE_FOLDER on each
call: credentials.json (access key id -> secret, security token, role, RAM policy documents) and nas.json (file
system id -> its protocol mount targets). Secrets live in this process: they outlive a host's reboot, as a cloud's do.
"""

from __future__ import annotations

import base64
import datetime
import fnmatch
import hashlib
import hmac
import json
import os
import ssl
import sys
import tempfile
import threading
import urllib.parse
import uuid

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

import certificates
import gcp_apis
import huawei_apis
import tencent_apis

STATE = sys.argv[1] if len(sys.argv) > 1 else "/state"
TLS_PORT = 443
PLAIN_PORT = 5000
ACCOUNT = "1234567890123456"
API_VERSIONS = {"kms": "2016-01-20", "nas": "2017-06-26"}
TIMESTAMP_SKEW = datetime.timedelta(minutes=15)
LOCK = threading.Lock()
NONCES: set[str] = set()
SECRETS: dict[tuple[str, str], dict] = {}
"""(region, secret name) -> {"versions": {version id: {"data", "type", "stages", "created"}}, "created", ...}"""


def state(name: str) -> dict:
    try:
        with open(os.path.join(STATE, name)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def encode(value: str) -> str:
    return urllib.parse.quote(str(value), safe="~")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def as_list(value) -> list:
    return value if isinstance(value, list) else [value] if value is not None else []


def ram_allows(policies: list[str], action: str, resource: str) -> bool:
    """RAM's evaluation: an explicit Deny wins, else some Allow must match action and resource (wildcards * and ?).
    A statement with a Condition is not one this stand-in can evaluate: it never allows."""
    allowed = False
    for document in policies:
        for statement in json.loads(document).get("Statement", []):
            actions = [a.lower() for a in as_list(statement.get("Action"))]
            if not any(fnmatch.fnmatchcase(action.lower(), a) for a in actions):
                continue
            if not any(fnmatch.fnmatchcase(resource, r) for r in as_list(statement.get("Resource"))):
                continue
            if statement.get("Effect") == "Deny":
                return False
            if statement.get("Effect") == "Allow" and not statement.get("Condition"):
                allowed = True
    return allowed


def authenticate(method: str, params: dict[str, str], product: str) -> dict:
    """The caller's credentials entry, once the request is signed as RPC signature version 1.0 requires."""
    for name in ("AccessKeyId", "Signature", "SignatureMethod", "SignatureVersion", "SignatureNonce", "Timestamp",
                 "Version", "Action"):
        if not params.get(name):
            raise ApiError(400, "MissingParameter", f"The input parameter {name} that is mandatory for processing "
                                                    "this request is not supplied.")
    if params["Version"] != API_VERSIONS[product]:
        raise ApiError(400, "InvalidVersion", f"Specified parameter Version is not valid: {params['Version']}")
    if (params["SignatureMethod"], params["SignatureVersion"]) != ("HMAC-SHA1", "1.0"):
        raise ApiError(400, "InvalidSignatureMethod", "Specified signature method is not supported.")
    caller = state("credentials.json").get(params["AccessKeyId"])
    if caller is None:
        raise ApiError(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
    if caller.get("token") and params.get("SecurityToken") != caller["token"]:
        raise ApiError(400, "InvalidSecurityToken.MismatchWithAccessKey",
                       "Specified SecurityToken mismatch with the AccessKey.")
    try:
        stamp = datetime.datetime.strptime(params["Timestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc)
    except ValueError:
        raise ApiError(400, "InvalidTimeStamp.Format", "Specified time stamp does not match the specified format.")
    if abs(datetime.datetime.now(datetime.timezone.utc) - stamp) > TIMESTAMP_SKEW:
        raise ApiError(400, "InvalidTimeStamp.Expired", "Specified time stamp or date value is expired.")
    signed = {k: v for k, v in params.items() if k != "Signature"}
    canonical = "&".join(encode(k) + "=" + encode(signed[k]) for k in sorted(signed))
    expected = base64.b64encode(hmac.new((caller["secret"] + "&").encode(),
                                         f"{method}&%2F&{encode(canonical)}".encode(), hashlib.sha1).digest()).decode()
    if not hmac.compare_digest(params["Signature"], expected):
        raise ApiError(400, "IncompleteSignature", "The request signature does not conform to Aliyun standards.")
    with LOCK:
        if params["SignatureNonce"] in NONCES:
            raise ApiError(400, "SignatureNonceUsed", "Specified signature nonce was used already.")
        NONCES.add(params["SignatureNonce"])
    return caller


def authorize(caller: dict, action: str, resource: str) -> None:
    if not ram_allows(caller.get("policies", []), action, resource):
        raise ApiError(403, "Forbidden.RAM", "User not authorized to operate on the specified resource, or this API "
                                             "doesn't support RAM.")


def stages_of(version: dict) -> dict:
    return {"VersionStage": sorted(version["stages"])}


def secret_of(region: str, params: dict) -> tuple[str, dict]:
    name = params.get("SecretName") or ""
    secret = SECRETS.get((region, name))
    if secret is None:
        raise ApiError(404, "Forbidden.ResourceNotFound", "The resource does not exist.")
    return name, secret


def data_of(params: dict) -> tuple[str, str]:
    kind = params.get("SecretDataType", "text")
    if kind not in ("text", "binary"):
        raise ApiError(400, "InvalidParameter", "The specified parameter SecretDataType is not valid.")
    if kind == "binary":
        try:
            base64.b64decode(params["SecretData"], validate=True)
        except ValueError:
            raise ApiError(400, "InvalidParameter", "The specified parameter SecretData is not valid base64.")
    return params["SecretData"], kind


def kms(region: str, caller: dict, params: dict) -> dict:
    action = params["Action"]
    name = params.get("SecretName") or ""
    authorize(caller, f"kms:{action}", f"acs:kms:{region}:{ACCOUNT}:secret/{name}")
    with LOCK:
        if action == "CreateSecret":
            for required in ("SecretName", "SecretData", "VersionId"):
                if not params.get(required):
                    raise ApiError(400, "MissingParameter", f"The parameter {required} is required.")
            if (region, name) in SECRETS:
                raise ApiError(400, "Rejected.ResourceExist", "The resource already exists.")
            data, kind = data_of(params)
            SECRETS[(region, name)] = {"created": now(), "description": params.get("Description", ""), "versions": {
                params["VersionId"]: {"data": data, "type": kind, "stages": {"ACSCurrent"}, "created": now()}}}
            return {"Arn": f"acs:kms:{region}:{ACCOUNT}:secret/{name}", "VersionId": params["VersionId"],
                    "SecretName": name, "SecretType": "Generic"}
        name, secret = secret_of(region, params)
        versions = secret["versions"]
        if action == "PutSecretValue":
            for required in ("VersionId", "SecretData"):
                if not params.get(required):
                    raise ApiError(400, "MissingParameter", f"The parameter {required} is required.")
            if params["VersionId"] in versions:
                raise ApiError(400, "Rejected.ResourceExist", "The resource already exists.")
            try:
                stages = set(json.loads(params.get("VersionStages") or '["ACSCurrent"]'))
            except ValueError:
                raise ApiError(400, "InvalidParameter", "The specified parameter VersionStages is not valid.")
            data, kind = data_of(params)
            if "ACSCurrent" in stages:  # the version it replaces becomes ACSPrevious
                current = next((v for v in versions.values() if "ACSCurrent" in v["stages"]), None)
                for other in versions.values():
                    other["stages"].discard("ACSPrevious")
                if current:
                    current["stages"].add("ACSPrevious")
            for other in versions.values():  # a stage marks one version: it moves to the new one
                other["stages"] -= stages
            versions[params["VersionId"]] = {"data": data, "type": kind, "stages": stages, "created": now()}
            return {"SecretName": name, "VersionId": params["VersionId"],
                    "VersionStages": {"VersionStage": sorted(stages)}}
        if action == "GetSecretValue":
            if params.get("VersionId"):
                found = versions.get(params["VersionId"])
                if found and params.get("VersionStage") and params["VersionStage"] not in found["stages"]:
                    found = None
                version_id = params["VersionId"]
            else:
                stage = params.get("VersionStage") or "ACSCurrent"
                version_id, found = next(((k, v) for k, v in versions.items() if stage in v["stages"]), (None, None))
            if found is None:
                raise ApiError(404, "Forbidden.ResourceNotFound", "The resource does not exist.")
            return {"SecretName": name, "SecretType": "Generic", "VersionId": version_id, "SecretData": found["data"],
                    "SecretDataType": found["type"], "VersionStages": stages_of(found), "CreateTime": found["created"]}
        if action == "ListSecretVersionIds":
            deprecated = params.get("IncludeDeprecated", "false").lower() == "true"
            listed = [{"VersionId": k, "CreateTime": v["created"], "VersionStages": stages_of(v)}
                      for k, v in versions.items() if deprecated or v["stages"]]
            size, page = min(int(params.get("PageSize") or 20), 100), int(params.get("PageNumber") or 1)
            return {"SecretName": name, "TotalCount": len(listed), "PageNumber": page, "PageSize": size,
                    "VersionIds": {"VersionId": listed[(page - 1) * size:page * size]}}
    raise ApiError(400, "InvalidAction.NotFound", f"Specified api {action} is not found.")


def nas(region: str, caller: dict, params: dict) -> dict:
    action, file_system = params["Action"], params.get("FileSystemId") or ""
    if action != "DescribeProtocolMountTarget":
        raise ApiError(400, "InvalidAction.NotFound", f"Specified api {action} is not found.")
    authorize(caller, f"nas:{action}", f"acs:nas:{region}:{ACCOUNT}:filesystem/{file_system}")
    found = state("nas.json").get(file_system)
    if found is None or found["region"] != region:
        raise ApiError(404, "InvalidFileSystem.NotFound", "The specified file system does not exist.")
    return {"ProtocolMountTargets": found["targets"], "TotalCount": len(found["targets"])}


PRODUCTS = {"kms": kms, "nas": nas}


def alibaba(environ, start_response):
    """An RPC-style Alibaba Cloud API: <product>[-vpc].<region>.aliyuncs.com."""
    request = Request(environ)
    host = request.host.split(":")[0]
    labels = host.split(".")
    product, region = labels[0].removesuffix("-vpc"), labels[1] if len(labels) > 3 else ""
    params = dict(request.args)
    if request.method == "POST":
        params.update(request.form)
    request_id = str(uuid.uuid4()).upper()
    try:
        if product not in PRODUCTS or not environ.get("wsgi.url_scheme") == "https":
            raise ApiError(400, "InvalidEndpoint", f"{host}: no such API endpoint (HTTPS only)")
        caller = authenticate(request.method, params, product)
        status, body = 200, PRODUCTS[product](region, caller, params)
        print(f"alibaba {product} {params['Action']} by {caller.get('role') or 'the account'}: 200", flush=True)
    except ApiError as e:
        status, body = e.status, {"Code": e.code, "Message": e.message, "HostId": host,
                                  "Recommend": "https://api.aliyun.com/troubleshoot"}
        print(f"alibaba {product} {params.get('Action')}: {e.status} {e.code}", flush=True)
    body["RequestId"] = request_id
    return Response(json.dumps(body), status=status, content_type="application/json")(environ, start_response)


def server_contexts(authority: certificates.Authority) -> ssl.SSLContext:
    """A TLS context whose certificate is made for the name each client asks for (SNI), signed by the run's CA."""
    made: dict[str, ssl.SSLContext] = {}
    folder = tempfile.mkdtemp()

    def context_for(name: str) -> ssl.SSLContext:
        if name not in made:
            path = os.path.join(folder, f"{name}.pem")
            with open(path, "w") as f:
                f.write(authority.server_pem(name))
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(path)
            made[name] = context
        return made[name]

    def by_name(connection, name, _context):
        if name and name.endswith((".amazonaws.com", ".aliyuncs.com", ".googleapis.com", tencent_apis.SUFFIX,
                                   huawei_apis.SUFFIX)):
            connection.context = context_for(name)

    default = context_for("cloud-apis.emulated")
    default.sni_callback = by_name
    return default


def main() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    aws = DomainDispatcherApplication(create_backend_app)
    google = gcp_apis.app(STATE)
    tencent = tencent_apis.app(STATE)
    huawei = huawei_apis.app(STATE)

    def cloud(environ, start_response):
        if environ.get("HTTP_HOST", "").split(":")[0].endswith(".aliyuncs.com"):
            return alibaba(environ, start_response)
        if environ.get("HTTP_HOST", "").split(":")[0] == gcp_apis.HOST:
            return google(environ, start_response)
        if environ.get("HTTP_HOST", "").split(":")[0].endswith(tencent_apis.SUFFIX):
            return tencent(environ, start_response)
        if environ.get("HTTP_HOST", "").split(":")[0].endswith(huawei_apis.SUFFIX):
            return huawei(environ, start_response)
        return aws(environ, start_response)

    with open(os.path.join(STATE, "ca.pem")) as cert, open(os.path.join(STATE, "ca.key")) as key:
        authority = certificates.Authority(cert.read(), key.read())
    tls = make_server("0.0.0.0", TLS_PORT, cloud, threaded=True, ssl_context=server_contexts(authority))
    plain = make_server("0.0.0.0", PLAIN_PORT, aws, threaded=True)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    print("cloud APIs ready", flush=True)
    tls.serve_forever()


if __name__ == "__main__":
    main()

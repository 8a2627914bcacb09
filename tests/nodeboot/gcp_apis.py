"""Google Cloud's Secret Manager API (v1, REST), as its reference documents it, for the emulated Google Cloud hosts:
served by tests/nodeboot/cloud_apis.py over TLS as secretmanager.googleapis.com (the run's CA signs its certificate),
on the stack's network under that name. The calls a host's munge step makes (templates/node/munge-key-gcp.sh.j2):

- GET /v1/projects/{p}/secrets/{s}/versions[?filter=state:ENABLED] (projects.secrets.versions.list, permission
  secretmanager.versions.list): {"versions": [SecretVersion, ...], "totalSize": n}, newest first; no "versions"
  key when none matches (proto3 JSON leaves an empty repeated field out).
- POST /v1/projects/{p}/secrets/{s}:addVersion with {"payload": {"data": base64}} (projects.secrets.addVersion,
  secretmanager.versions.add): the new SecretVersion (ids count from 1).
- GET /v1/projects/{p}/secrets/{s}/versions/{v|latest}:access (projects.secrets.versions.access,
  secretmanager.versions.access): {"name", "payload": {"data": base64, "dataCrc32c": "<int64 as a string>"}};
  404 NOT_FOUND while the secret has no version.

Every call needs `Authorization: Bearer <access token>`, a token the metadata server handed a service account (the
test registers it): none or an unknown one is 401 UNAUTHENTICATED. Then IAM on the secret (the plan's
SecretIamMember bindings, by role) must grant the permission: else 403 PERMISSION_DENIED. A secret the test did not
register is 404 NOT_FOUND. Errors are Google's JSON error shape: {"error": {"code", "message", "status"}}; names in
answers carry the project's number, as Google's do.

What the test registers is read on every call from STATE_FOLDER/gcp.json (register()): {"tokens": {token: service
account email}, "secrets": {"projects/<id>/secrets/<s>": {"project_number": n, "members": {email: [roles]}}}}. Each
call is appended to STATE_FOLDER/secretmanager.log as `METHOD PATH caller=<email or -> STATUS`. Versions live in
this process: they outlive a host's reboot, as a cloud's do.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import http.client
import json
import os
import socket
import ssl
import threading
import urllib.parse

HOST = "secretmanager.googleapis.com"
STATE_FILE = "gcp.json"
LOG = "secretmanager.log"
ROLES = {
    "roles/secretmanager.admin": {"secretmanager.versions.list", "secretmanager.versions.get",
                                  "secretmanager.versions.add", "secretmanager.versions.access"},
    "roles/secretmanager.secretAccessor": {"secretmanager.versions.access"},
    "roles/secretmanager.secretVersionAdder": {"secretmanager.versions.add"},
    "roles/secretmanager.viewer": {"secretmanager.versions.list", "secretmanager.versions.get"},
}
"""IAM roles for Secret Manager and the permissions of theirs these calls check ("Access control with IAM")."""
_LOCK = threading.Lock()
VERSIONS: dict[str, list[dict]] = {}
"""secret name (projects/<id>/secrets/<s>) -> its versions, oldest first: {"id", "data" (bytes), "created"}"""


def _crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli), what SecretPayload.dataCrc32c holds."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


class ApiError(Exception):
    def __init__(self, code: int, status: str, message: str):
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


def _state(folder: str) -> dict:
    try:
        with open(os.path.join(folder, STATE_FILE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _version(secret: str, number: int, version: dict) -> dict:
    return {"name": f"projects/{number}/secrets/{secret.rsplit('/', 1)[-1]}/versions/{version['id']}",
            "createTime": version["created"], "state": "ENABLED",
            "replicationStatus": {"userManaged": {"replicas": []}}, "etag": f"\"{version['etag']}\""}


def handle(folder: str, method: str, path: str, query: dict[str, str], headers: dict[str, str],
           body: bytes) -> tuple[int, dict, str]:
    """(HTTP status, JSON answer, caller's email or "") of one call."""
    state = _state(folder)
    auth = headers.get("authorization", "")
    caller = state.get("tokens", {}).get(auth[7:]) if auth[:7].lower() == "bearer " else None
    if not caller:
        raise ApiError(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 "
                                               "access token, login cookie or other valid authentication credential.")
    if not path.startswith("/v1/projects/"):
        raise ApiError(404, "NOT_FOUND", f"The requested URL {path} was not found on this server.")
    resource = urllib.parse.unquote(path[len("/v1/"):])
    parts = resource.split("/")
    if len(parts) < 4 or parts[2] != "secrets":
        raise ApiError(404, "NOT_FOUND", f"The requested URL {path} was not found on this server.")
    secret_id, verb = parts[3].partition(":")[::2]
    secret = f"projects/{parts[1]}/secrets/{secret_id}"
    rest = parts[4:]

    def allowed(permission: str) -> None:
        granted = set().union(*(ROLES.get(role, set()) for role in entry.get("members", {}).get(caller, [])))
        if permission not in granted:
            raise ApiError(403, "PERMISSION_DENIED", f"Permission '{permission}' denied for resource "
                                                     f"'{secret}' (or it may not exist).")

    entry = state.get("secrets", {}).get(secret)
    if entry is None:  # by the project's number, as Google's own names give it
        entry = next((e for name, e in state.get("secrets", {}).items()
                      if f"projects/{e.get('project_number')}/secrets/{secret_id}" == secret), None)
        secret = next((name for name, e in state.get("secrets", {}).items() if e is entry), secret)
    if entry is None:
        raise ApiError(404, "NOT_FOUND", f"Secret [{secret}] not found or has no versions.")
    number = entry.get("project_number", parts[1])
    with _LOCK:
        versions = VERSIONS.setdefault(secret, [])
        if method == "POST" and verb == "addVersion" and not rest:
            allowed("secretmanager.versions.add")
            try:
                data = base64.b64decode(json.loads(body or b"{}")["payload"]["data"], validate=True)
            except (ValueError, KeyError, TypeError, binascii.Error):
                raise ApiError(400, "INVALID_ARGUMENT", "Invalid value at 'payload.data' (TYPE_BYTES): expected "
                                                       "base64 data.")
            created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            version = {"id": len(versions) + 1, "data": data, "created": created,
                       "etag": os.urandom(6).hex()}
            versions.append(version)
            return 200, _version(secret, number, version), caller
        if method == "GET" and not verb and rest == ["versions"]:
            allowed("secretmanager.versions.list")
            wanted = query.get("filter", "")
            if wanted and wanted.replace(" ", "") not in ("state:ENABLED", "state=ENABLED"):
                raise ApiError(400, "INVALID_ARGUMENT", f"Invalid filter: {wanted}")
            listed = [_version(secret, number, v) for v in reversed(versions)]
            return 200, ({"versions": listed, "totalSize": len(listed)} if listed else {}), caller
        if method == "GET" and not verb and len(rest) == 2 and rest[0] == "versions" and rest[1].endswith(":access"):
            allowed("secretmanager.versions.access")
            which = rest[1][:-len(":access")]
            found = versions[-1:] if which == "latest" else [v for v in versions if str(v["id"]) == which]
            if not found:
                raise ApiError(404, "NOT_FOUND", f"Secret Version [{secret}/versions/{which}] not found.")
            version = found[0]
            return 200, {"name": _version(secret, number, version)["name"], "payload": {
                "data": base64.b64encode(version["data"]).decode(),
                "dataCrc32c": str(_crc32c(version["data"]))}}, caller
    raise ApiError(404, "NOT_FOUND", f"The requested URL {path} was not found on this server.")


def app(folder: str):
    """The API as a WSGI application (werkzeug's Request and Response, as cloud_apis.py serves the others)."""
    from werkzeug.wrappers import Request, Response

    def secret_manager(environ, start_response):
        request = Request(environ)
        caller = ""
        try:
            if environ.get("wsgi.url_scheme") != "https":
                raise ApiError(403, "PERMISSION_DENIED", "HTTPS only")
            status, answer, caller = handle(folder, request.method, request.path, dict(request.args),
                                            {k.lower(): v for k, v in request.headers.items()}, request.get_data())
        except ApiError as e:
            status, answer = e.code, {"error": {"code": e.code, "message": e.message, "status": e.status}}
        with _LOCK, open(os.path.join(folder, LOG), "a") as f:
            f.write(f"{request.method} {request.full_path.rstrip('?')} caller={caller or '-'} {status}\n")
        print(f"gcp secretmanager {request.method} {request.path} by {caller or '-'}: {status}", flush=True)
        response = Response(json.dumps(answer), status=status, content_type="application/json; charset=UTF-8")
        if status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="https://accounts.google.com/"'
        return response(environ, start_response)

    return secret_manager


# the test's side: what it registers, and its calls

def register(folder, *, tokens: dict[str, str], secrets: dict[str, dict]) -> None:
    """Tokens the metadata server hands out (token -> service account email) and the stack's secrets (name ->
    {"project_number", "members": {email: [roles]}}), added to what is registered."""
    path = os.path.join(str(folder), STATE_FILE)
    with _LOCK:
        data = _state(str(folder))
        data.setdefault("tokens", {}).update(tokens)
        data.setdefault("secrets", {}).update(secrets)
        with open(path + ".new", "w") as f:
            json.dump(data, f)
        os.replace(path + ".new", path)


def members_of(resources, secret_id: str) -> dict[str, list[str]]:
    """IAM on the secret as the plan binds it (gcp:secretmanager/secretIamMember): service account email ->
    roles."""
    members: dict[str, list[str]] = {}
    for r in resources:
        if r.type == "gcp:secretmanager/secretIamMember:SecretIamMember" and r.props.get("secretId") == secret_id:
            members.setdefault(r.props["member"].removeprefix("serviceAccount:"), []).append(r.props["role"])
    return members


def requests_of(folder) -> list[tuple[str, str, str, int]]:
    """(method, path with query, caller's email or "-", status) of every call so far."""
    try:
        with open(os.path.join(str(folder), LOG)) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        method, path, caller, status = line.split(" ")
        out.append((method, path, caller.removeprefix("caller="), int(status)))
    return out


def call(address: str, ca_pem: str, method: str, path: str, token: str | None = None,
         body: dict | None = None, port: int = 443) -> tuple[int, dict]:
    """One call to the API at `address` by its name (SNI, Host, the certificate checked against the run's CA):
    (HTTP status, answer)."""
    context = ssl.create_default_context(cadata=ca_pem)
    sock = socket.create_connection((address, port), 15)
    connection = http.client.HTTPSConnection(HOST, port, context=context, timeout=15)
    connection.sock = context.wrap_socket(sock, server_hostname=HOST)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body), "application/json"
    connection.request(method, path, body=data, headers=headers)
    response = connection.getresponse()
    answer = response.read().decode()
    connection.close()
    return response.status, json.loads(answer) if answer else {}

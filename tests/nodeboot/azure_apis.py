"""Azure Key Vault's secrets API (data plane, REST api-version 7.4), as its reference documents it, for the emulated
Azure hosts (stdlib only). Started by tests/nodeboot/test_emulated_azure.py in a container on the node's network
under each vault's name (<vault>.vault.azure.net, as Azure's DNS resolves it), over TLS with a certificate the run's
CA signed (STATE_FOLDER/tls/<name>.pem, picked by SNI), with the host image's Python:

    python3 azure_apis.py STATE_FOLDER [PORT]

The calls a host's munge step makes (templates/node/munge-key-azure.sh.j2), and their sources:

- GET /secrets/{name}[/{version}]?api-version=7.4 (Get Secret; data action
  Microsoft.KeyVault/vaults/secrets/getSecret/action): the SecretBundle {"value", "contentType", "id":
  "https://<vault>.vault.azure.net/secrets/<name>/<version>", "attributes": {"enabled", "created", "updated",
  "recoveryLevel"}, "tags"} (azure-rest-api-specs, keyvault data-plane 7.4, GetSecret-example.json); the latest
  version without one; 404 {"error": {"code": "SecretNotFound", "message": "A secret with (name/id) <name> was not
  found in this key vault. ..."}} when there is none (the Azure SDKs' recorded answers).
- PUT /secrets/{name}?api-version=7.4 with {"value", "contentType", "attributes", "tags"} (Set Secret; data action
  .../secrets/setSecret/action): a new version each time, answered with its SecretBundle (SetSecret-example.json).
  Names match ^[0-9a-zA-Z-]+$ (1 to 127 characters); a value is at most 25 KB ("About secrets").

Every call needs `Authorization: Bearer <token>`: none is 401 {"error": {"code": "Unauthorized", "message":
"AKV10000: Request is missing a Bearer or PoP token."}} with `WWW-Authenticate: Bearer authorization=..., resource=
"https://vault.azure.net"` (recorded answers); a token the emulated Entra ID did not sign, an expired one or one for
another audience is 401 too. Then Azure RBAC on the vault (the permission model the plan's vault uses): the caller's
object id (the token's oid) must hold a role on the vault whose data actions include the call's, as the plan's role
assignments give them (Key Vault Secrets User: getSecret, readMetadata; Key Vault Secrets Officer: every secrets
action; "Azure built-in roles"), else 403 {"error": {"code": "Forbidden", "message": "Caller is not authorized to
perform action on resource. ... Action: '...' ... Assignment: (not found) ...", "innererror": {"code":
"ForbiddenByRbac"}}} (recorded answers). The vault's network rules (the compute subnet only) are not emulated: the
stack's network is the only one that reaches the container.

What the test registers is read on every call from STATE_FOLDER/keyvault.json (register()): {"vaults": {name: {"id":
the vault's resource id, "tenant_id", "assignments": {object id: [role names]}}}}; tokens are checked with the
emulated Entra ID's key (azure_imds.py, STATE_FOLDER/entra.key). Each call is appended to STATE_FOLDER/keyvault.log
as `METHOD PATH caller=<oid or -> STATUS`. Versions live in this process: they outlive a host's reboot, as a vault's do.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import azure_imds

SUFFIX = ".vault.azure.net"
RESOURCE = "https://vault.azure.net"
STATE_FILE = "keyvault.json"
LOG = "keyvault.log"
TLS = "tls"
API_VERSIONS = ("7.0", "7.1", "7.2", "7.3", "7.4", "7.5", "7.6", "2025-07-01")
SECRET_NAME = re.compile(r"^[0-9a-zA-Z-]{1,127}$")
MAX_VALUE_BYTES = 25 * 1024
RECOVERY_LEVEL = "CustomizedRecoverable+Purgeable"
"""Soft delete with a retention under 90 days and purge allowed (DeletionRecoveryLevel): the plan's vault keeps
deleted secrets 7 days, without purge protection."""
SECRETS = "Microsoft.KeyVault/vaults/secrets/"
ROLES = {
    "Key Vault Secrets User": {"getSecret/action", "readMetadata/action"},
    "Key Vault Secrets Officer": {"getSecret/action", "readMetadata/action", "setSecret/action", "update/action",
                                  "delete", "backup/action", "restore/action", "recover/action", "purge/action"},
    "Key Vault Administrator": {"getSecret/action", "readMetadata/action", "setSecret/action", "update/action",
                                "delete", "backup/action", "restore/action", "recover/action", "purge/action"},
    "Key Vault Reader": {"readMetadata/action"},
}
"""Built-in roles and the secrets data actions they grant ("Azure built-in roles": Security; Secrets Officer and
Administrator hold Microsoft.KeyVault/vaults/secrets/*)."""
_LOCK = threading.Lock()
VERSIONS: dict[tuple[str, str], list[dict]] = {}
"""(vault, secret name) -> versions, oldest first: {"id", "value", "contentType", "created"}"""


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, inner: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.inner = status, code, message, inner
        self.caller = ""
        """The authenticated caller's object id, once known."""

    def body(self) -> dict:
        error = {"code": self.code, "message": self.message}
        if self.inner:
            error["innererror"] = {"code": self.inner}
        return {"error": error}


def _state(folder: Path) -> dict:
    try:
        return json.loads((Path(folder) / STATE_FILE).read_text())
    except FileNotFoundError:
        return {}


def _bundle(host: str, name: str, version: dict) -> dict:
    bundle = {"value": version["value"], "id": f"https://{host}/secrets/{name}/{version['id']}",
              "attributes": {"enabled": True, "created": version["created"], "updated": version["created"],
                             "recoveryLevel": RECOVERY_LEVEL, "recoverableDays": 7}, "tags": version["tags"]}
    if version.get("contentType"):
        bundle["contentType"] = version["contentType"]
    return bundle


def handle(folder: Path, method: str, host: str, path: str, query: dict[str, str], headers: dict[str, str],
           body: bytes) -> tuple[int, dict, str]:
    """(HTTP status, JSON answer, caller's object id or "") of one call."""
    vault_name = host.split(":")[0].removesuffix(SUFFIX)
    vault = _state(folder).get("vaults", {}).get(vault_name)
    if vault is None:  # Azure's DNS knows no such vault: the container is reached under a known name only
        raise ApiError(404, "VaultNotFound", f"The vault {vault_name} was not found.")
    auth = headers.get("authorization", "")
    if not auth.lower().startswith("bearer "):
        raise ApiError(401, "Unauthorized", "AKV10000: Request is missing a Bearer or PoP token.")
    claims = azure_imds.verify_token(folder, auth[7:].strip())
    if claims is None:
        raise ApiError(401, "Unauthorized", "AKV10022: Invalid token: the token's signature or lifetime is not "
                                            "valid.")  # wording (unverified)
    if claims.get("aud", "").rstrip("/") != RESOURCE:
        raise ApiError(401, "Unauthorized", f"AKV10022: Invalid audience. Expected {RESOURCE}, found: "
                                            f"{claims.get('aud')}.")  # wording (unverified)
    try:
        return _authorized(vault_name, vault, claims, method, host, path, query, body)
    except ApiError as e:
        e.caller = claims["oid"]
        raise


def _authorized(vault_name: str, vault: dict, claims: dict, method: str, host: str, path: str,
                query: dict[str, str], body: bytes) -> tuple[int, dict, str]:
    caller = claims["oid"]
    if query.get("api-version") not in API_VERSIONS:
        raise ApiError(400, "BadParameter", "The specified version (api-version) is not supported or was not "
                                            "given.")  # wording (unverified)
    parts = [p for p in path.split("/") if p]
    if len(parts) not in (2, 3) or parts[0] != "secrets" or not SECRET_NAME.match(parts[1]):
        raise ApiError(400 if parts[:1] == ["secrets"] else 404, "BadParameter",
                       "The request URI contains an invalid name or an unsupported operation.")  # (unverified)
    name = parts[1]

    def allowed(action: str) -> None:
        granted = set().union(*(ROLES.get(role, set()) for role in vault.get("assignments", {}).get(caller, [])))
        if action not in granted:
            raise ApiError(403, "Forbidden", (
                "Caller is not authorized to perform action on resource.\r\nIf role assignments, deny assignments or "
                "role definitions were changed recently, please observe propagation time.\r\n"
                f"Caller: appid={claims.get('appid')};oid={caller};iss={claims.get('iss')}\r\n"
                f"Action: '{SECRETS}{action}'\r\nResource: '{vault['id'].lower()}/secrets/{name.lower()}'\r\n"
                "Assignment: (not found)\r\nDenyAssignmentId: null\r\nDecisionReason: 'DeniedWithNoValidRBAC' \r\n"
                f"Vault: {vault_name};location=eastus\r\n"), "ForbiddenByRbac")

    with _LOCK:
        versions = VERSIONS.setdefault((vault_name, name.lower()), [])
        if method == "GET":
            allowed("getSecret/action")
            found = versions[-1:] if len(parts) == 2 else [v for v in versions if v["id"] == parts[2]]
            if not found:
                shown = name if len(parts) == 2 else f"{name}/{parts[2]}"
                raise ApiError(404, "SecretNotFound", f"A secret with (name/id) {shown} was not found in this key "
                                                      "vault. If you recently deleted this secret you may be able to "
                                                      "recover it using the correct recovery command. For help "
                                                      "resolving this issue, please see "
                                                      "https://go.microsoft.com/fwlink/?linkid=2125182")
            return 200, _bundle(host.split(":")[0], name, found[0]), caller
        if method == "PUT" and len(parts) == 2:
            allowed("setSecret/action")
            try:
                request = json.loads(body or b"{}")
                value = request["value"]
                if not isinstance(value, str):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "BadParameter", "Property value is required and must be a string.")  # (unverified)
            if len(value.encode()) > MAX_VALUE_BYTES:
                raise ApiError(400, "BadParameter",
                               f"The secret value exceeds {MAX_VALUE_BYTES} bytes.")  # wording (unverified)
            version = {"id": uuid.uuid4().hex, "value": value, "contentType": request.get("contentType"),
                       "tags": request.get("tags") or {}, "created": int(time.time())}
            versions.append(version)
            return 200, _bundle(host.split(":")[0], name, version), caller
    raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}.")  # (unverified)


class Handler(BaseHTTPRequestHandler):
    state: Path
    protocol_version = "HTTP/1.1"

    def _call(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        host = self.headers.get("Host", "")
        caller = ""
        try:
            status, answer, caller = handle(self.state, self.command, host, url.path,
                                            dict(urllib.parse.parse_qsl(url.query)),
                                            {k.lower(): v for k, v in self.headers.items()}, body)
        except ApiError as e:
            status, answer, caller = e.status, e.body(), e.caller
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            tenant = _state(self.state).get("vaults", {}).get(host.split(":")[0].removesuffix(SUFFIX), {})
            self.send_header("WWW-Authenticate", f'Bearer authorization="https://login.microsoftonline.com/'
                                                 f'{tenant.get("tenant_id", "")}", resource="{RESOURCE}"')
        self.end_headers()
        self.wfile.write(data)
        with _LOCK, open(self.state / LOG, "a") as f:
            f.write(f"{self.command} {self.path} caller={caller or '-'} {status}\n")

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _call

    def log_message(self, *args) -> None:
        pass


def tls_context(folder: Path) -> ssl.SSLContext:
    """The server's TLS: the certificate made for the name the client asks for (SNI), from STATE_FOLDER/tls."""
    made: dict[str, ssl.SSLContext] = {}

    def context_for(name: str) -> ssl.SSLContext | None:
        path = Path(folder) / TLS / f"{name}.pem"
        if name not in made and path.exists():
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(path))
            made[name] = context
        return made.get(name)

    def by_name(connection, name, _context):
        found = context_for(name or "")
        if found is not None:
            connection.context = found

    default = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    first = sorted((Path(folder) / TLS).glob("*.pem"))[0]
    default.load_cert_chain(str(first))
    default.sni_callback = by_name
    return default


def serve(state: Path, host: str = "0.0.0.0", port: int = 443) -> ThreadingHTTPServer:
    handler = type("KeyVault", (Handler,), {"state": Path(state)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.socket = tls_context(Path(state)).wrap_socket(server.socket, server_side=True)
    return server


# the test's side: what it registers, and its calls

def register(folder, *, vault: str, vault_id: str, tenant_id: str, assignments: dict[str, list[str]],
             certificate_pem: str) -> None:
    """A vault the plan declared (its name, resource id), its role assignments (object id -> role names) and the
    certificate for <vault>.vault.azure.net the run's CA made."""
    folder = Path(folder)
    (folder / TLS).mkdir(exist_ok=True)
    (folder / TLS / f"{vault}{SUFFIX}.pem").write_text(certificate_pem)
    with _LOCK:
        data = _state(folder)
        data.setdefault("vaults", {})[vault] = {"id": vault_id, "tenant_id": tenant_id, "assignments": assignments}
        (folder / f"{STATE_FILE}.new").write_text(json.dumps(data))
        os.replace(folder / f"{STATE_FILE}.new", folder / STATE_FILE)


def assignments_of(resources, vault_id: str) -> dict[str, list[str]]:
    """The plan's role assignments on the vault (azure-native:authorization:RoleAssignment whose scope is the vault):
    principal (object) id -> built-in role names."""
    from goldenenv.clouds.azure.roles import BUILT_IN

    names = {guid: name for name, guid in BUILT_IN.items()}
    found: dict[str, list[str]] = {}
    for r in resources:
        if r.type == "azure-native:authorization:RoleAssignment" and r.props.get("scope") == vault_id:
            role = names.get(str(r.props.get("roleDefinitionId", "")).rsplit("/", 1)[-1])
            if role:
                found.setdefault(r.props["principalId"], []).append(role)
    return found


def requests_of(folder) -> list[tuple[str, str, str, int]]:
    """(method, path with query, caller's object id or "-", status) of every call so far."""
    try:
        lines = (Path(folder) / LOG).read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        method, path, caller, status = line.split(" ")
        out.append((method, path, caller.removeprefix("caller="), int(status)))
    return out


def call(address: str, ca_pem: str, vault_host: str, method: str, path: str, token: str | None = None,
         body: dict | None = None, port: int = 443) -> tuple[int, dict]:
    """One call to the vault at `address` by its name (SNI, Host, the certificate checked against the run's CA):
    (HTTP status, answer)."""
    context = ssl.create_default_context(cadata=ca_pem)
    sock = socket.create_connection((address, port), 15)
    connection = http.client.HTTPSConnection(vault_host, port, context=context, timeout=15)
    connection.sock = context.wrap_socket(sock, server_hostname=vault_host)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body), "application/json"
    connection.request(method, path, body=data, headers=headers)
    response = connection.getresponse()
    answer = response.read().decode()
    connection.close()
    return response.status, json.loads(answer) if answer else {}


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "/state")
    server = serve(folder, "0.0.0.0", int(sys.argv[2]) if len(sys.argv) > 2 else 443)
    print("key vault ready", flush=True)
    server.serve_forever()

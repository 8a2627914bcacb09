"""A cloud's container registry under its own name, for the emulated hosts: it checks who pulls the way the cloud
does, and serves the golden image from the anonymous registry on this machine (conftest.py's golden_ref).

The emulated hosts' docker is this machine's engine (tests/nodeboot/stand_ins.py), so the login and the pull are
made by the engine here. It reaches the registry's real name (us-central1-docker.pkg.dev) on loopback only:
serve() adds `127.0.0.x <name>` to this machine's /etc/hosts for the run and always takes it out again
(hosts_entry). The engine treats a registry whose address is in 127.0.0.0/8 as insecure (its default
--insecure-registry): HTTPS without checking the certificate, then plain HTTP; the stand-in answers HTTPS on
127.0.0.x:443 with a certificate for the name from the run's CA, so the first try is the one taken.

The Docker Registry HTTP API V2 with its token flow ("Token Authentication Specification"), as the clouds' registries
speak it:

- Any /v2/ call without a valid bearer token: 401 with `WWW-Authenticate: Bearer realm="https://<name>/v2/token",
  service="<name>"` (plus `scope="repository:<path>:pull"` on a repository's call).
- GET /v2/token?service=...&scope=... with `Authorization: Basic <user:password>`: the Identity says who the caller
  is (none: 401 UNAUTHORIZED); the answer is a bearer token for that caller ({"token", "access_token",
  "expires_in"}). A token is issued whatever the scope, and the repository's IAM is checked on each call, as
  Artifact Registry does: `docker pull` then prints "Head|Get "https://.../manifests/...": denied: Permission
  "artifactregistry.repositories.downloadArtifacts" denied on resource "projects/P/locations/L/repositories/R"
  (or it may not exist)" (Google's answer, 403 with the registry's {"errors": [{"code": "DENIED", ...}]}).
- GET/HEAD /v2/<repository path>/manifests|blobs/<reference>: the Identity must allow the caller to pull the
  repository, then the call is answered by the anonymous registry under the image's name there (`images`); a
  path not published here is 404 NAME_UNKNOWN. Pushes are not served (405 UNSUPPORTED): the hosts only pull.

Identity is one class per cloud (Google Cloud's Artifact Registry now: ArtifactRegistry). Another cloud plugs in
with its own:

- Amazon ECR: `token_flow = False` (ECR answers 401 `Basic realm="https://<account>.dkr.ecr.<region>.amazonaws.com/",
  service="ecr.amazonaws.com"` and takes Basic on every call); authenticate() takes user `AWS` and a password
  the emulated GetAuthorizationToken issued for a role (moto, tests/nodeboot/emulated_cloud.py), authorize()
  evaluates the role's policies for ecr:BatchGetImage / ecr:GetDownloadUrlForLayer on the repository's ARN and
  denies with ECR's "denied: User: <role ARN> is not authorized to perform: ecr:BatchGetImage on resource: ...".
- Azure Container Registry: the token flow, realm `https://<name>.azurecr.io/oauth2/token`; authenticate() takes
  user 00000000-0000-0000-0000-000000000000 and a refresh token the emulated IMDS/ACR exchange issued for a
  managed identity (tests/nodeboot/azure_imds.py), authorize() checks the AcrPull (or higher) role assignment
  on the registry's scope and denies with ACR's own answer (look its wording up before writing it down).

Every call is recorded in RegistryStandIn.requests as (method, path, caller or "-", status).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ipaddress
import json
import os
import random
import ssl
import tempfile
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol

HOSTS = Path("/etc/hosts")
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
PORT = 443
"""The port a registry name without a port is reached on over HTTPS."""
TOKEN_LIFETIME_S = 3600
FORWARDED = ("Content-Type", "Content-Length", "Docker-Content-Digest", "ETag", "Docker-Distribution-Api-Version")
"""What the stand-in passes on from the anonymous registry's answers."""


class Denied(Exception):
    """The registry's refusal: HTTP status, the registry API's error code, and the cloud's message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Identity(Protocol):
    """How one cloud's registry knows who calls and what they may pull."""

    name: str
    """The registry's host name (what image references start with)."""
    token_flow: bool
    """True: a bearer token from /v2/token (Basic there); False: Basic credentials on every call."""

    def authenticate(self, username: str, password: str) -> str | None:
        """The caller (a principal's name) for these credentials, None when the cloud would not accept them."""

    def authorize(self, caller: str, repository: str) -> None:
        """Return if the caller may pull `repository` (the path after the host name, the image's included), else
        raise Denied with the cloud's answer."""


ARTIFACT_REGISTRY_PULL = "artifactregistry.repositories.downloadArtifacts"
ARTIFACT_REGISTRY_ROLES = {
    "roles/artifactregistry.reader": {ARTIFACT_REGISTRY_PULL},
    "roles/artifactregistry.writer": {ARTIFACT_REGISTRY_PULL, "artifactregistry.repositories.uploadArtifacts"},
    "roles/artifactregistry.repoAdmin": {ARTIFACT_REGISTRY_PULL, "artifactregistry.repositories.uploadArtifacts",
                                         "artifactregistry.repositories.deleteArtifacts"},
    "roles/artifactregistry.admin": {ARTIFACT_REGISTRY_PULL, "artifactregistry.repositories.uploadArtifacts",
                                     "artifactregistry.repositories.deleteArtifacts"},
}
"""Artifact Registry's predefined roles and the repository permissions of theirs that matter here ("Artifact
Registry roles and permissions"); a role not listed grants none of them."""


@dataclass
class ArtifactRegistry:
    """Google Cloud's Artifact Registry (Docker format) in one region, `<region>-docker.pkg.dev`: the login is user
    `oauth2accesstoken` with an access token the metadata server handed a service account ("Configure
    authentication to Artifact Registry for Docker": access token); a pull needs
    artifactregistry.repositories.downloadArtifacts on the repository (IAM on it, by role)."""

    region: str
    tokens: dict[str, str]
    """access token -> service account email (the tokens the metadata server stand-in hands out)."""
    members: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """repository resource (projects/<project>/locations/<region>/repositories/<id>) -> {email: [roles]}; changes
    take effect on the next call, as an IAM change does (after its propagation)."""
    token_flow: bool = True

    @property
    def name(self) -> str:
        return f"{self.region}-docker.pkg.dev"

    def resource(self, repository: str) -> str:
        project, repo = (repository.split("/") + ["", ""])[:2]
        return f"projects/{project}/locations/{self.region}/repositories/{repo}"

    def authenticate(self, username: str, password: str) -> str | None:
        return self.tokens.get(password) if username == "oauth2accesstoken" else None

    def authorize(self, caller: str, repository: str) -> None:
        resource = self.resource(repository)
        roles = self.members.get(resource, {}).get(caller, [])
        if not any(ARTIFACT_REGISTRY_PULL in ARTIFACT_REGISTRY_ROLES.get(role, ()) for role in roles):
            raise Denied(403, "DENIED", f'Permission "{ARTIFACT_REGISTRY_PULL}" denied on resource "{resource}" '
                                        "(or it may not exist)")


def artifact_registry_members(resources) -> dict[str, dict[str, list[str]]]:
    """IAM on the plan's Artifact Registry repositories (gcp:artifactregistry/repositoryIamMember): repository
    resource -> service account email -> roles."""
    members: dict[str, dict[str, list[str]]] = {}
    for r in resources:
        if r.type == "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember":
            p = r.props
            resource = f"projects/{p['project']}/locations/{p['location']}/repositories/{p['repository']}"
            email = p["member"].removeprefix("serviceAccount:")
            members.setdefault(resource, {}).setdefault(email, []).append(p["role"])
    return members


def _error(code: str, message: str) -> dict:
    return {"errors": [{"code": code, "message": message, "detail": None}]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    stand_in: RegistryStandIn

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, body: dict | None, caller: str, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.stand_in.record(self.command, self.path, caller, status)

    def _basic(self) -> tuple[str, str] | None:
        auth = self.headers.get("Authorization", "")
        if auth[:6].lower() != "basic ":
            return None
        try:
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return user, password

    def _caller(self) -> str | None:
        identity = self.stand_in.identity
        if not identity.token_flow:
            basic = self._basic()
            return identity.authenticate(*basic) if basic else None
        auth = self.headers.get("Authorization", "")
        return self.stand_in.bearer.get(auth[7:]) if auth[:7].lower() == "bearer " else None

    def _challenge(self, repository: str | None) -> str:
        identity = self.stand_in.identity
        if not identity.token_flow:
            return f'Basic realm="https://{identity.name}/"'
        scope = f',scope="repository:{repository}:pull"' if repository else ""
        return f'Bearer realm="https://{identity.name}/v2/token",service="{identity.name}"{scope}'

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        identity = self.stand_in.identity
        if url.path == "/v2/token" and identity.token_flow:
            basic = self._basic()
            caller = identity.authenticate(*basic) if basic else None
            if not caller:
                return self._answer(401, _error("UNAUTHORIZED", "authentication failed"), "-",
                                    {"WWW-Authenticate": self._challenge(None)})
            token = "emulated-" + os.urandom(16).hex()
            self.stand_in.bearer[token] = caller
            return self._answer(200, {"token": token, "access_token": token, "expires_in": TOKEN_LIFETIME_S},
                                caller)
        if not url.path.startswith("/v2/"):
            return self._answer(404, _error("NOT_FOUND", "not found"), "-")
        rest = url.path[len("/v2/"):]
        parts = rest.split("/")
        kind = parts[-2] if len(parts) >= 3 else ""
        repository = "/".join(parts[:-2]) if kind in ("manifests", "blobs") else None
        caller = self._caller()
        if not caller:
            return self._answer(401, _error("UNAUTHORIZED", "authentication required"), "-",
                                {"WWW-Authenticate": self._challenge(repository)})
        if rest == "":
            return self._answer(200, {}, caller)
        if repository is None:
            return self._answer(404, _error("NOT_FOUND", "not found"), caller)
        try:
            identity.authorize(caller, repository)
        except Denied as e:
            return self._answer(e.status, _error(e.code, e.message), caller)
        upstream = self.stand_in.images.get(repository)
        if upstream is None:
            return self._answer(404, _error("NAME_UNKNOWN", f"repository name not known to registry: {repository}"),
                                caller)
        self._forward(f"/v2/{upstream}/{kind}/{parts[-1]}", caller)

    do_HEAD = do_GET

    def _refuse_write(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(405, _error("UNSUPPORTED", "the emulated registry serves pulls only"), self._caller() or "-")

    do_PUT = do_POST = do_PATCH = do_DELETE = _refuse_write

    def _forward(self, path: str, caller: str) -> None:
        """The anonymous registry's answer to the same call, streamed back."""
        host, port = self.stand_in.upstream.rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            accept = self.headers.get_all("Accept") or []
            connection.request(self.command, path, headers={"Accept": ", ".join(accept)} if accept else {})
            answer = connection.getresponse()
            self.send_response(answer.status)
            for name in FORWARDED:
                if answer.getheader(name) is not None:
                    self.send_header(name, answer.getheader(name))
            if answer.getheader("Content-Length") is None:
                self.send_header("Content-Length", "0")
            self.end_headers()
            if self.command != "HEAD":
                while chunk := answer.read(1 << 20):
                    self.wfile.write(chunk)
            self.stand_in.record(self.command, self.path, caller, answer.status)
        finally:
            connection.close()


class RegistryStandIn:
    """The registry on (address, port: 443, 0 for any) over TLS, answering as `identity` with the images of
    `upstream` (the anonymous registry's host:port on loopback): images maps a repository path under the registry's
    name to the repository there."""

    def __init__(self, identity: Identity, upstream: str, images: dict[str, str], address: str, server_pem: str,
                 port: int = PORT):
        self.identity, self.upstream, self.images, self.address = identity, upstream, images, address
        self.bearer: dict[str, str] = {}
        self.requests: list[tuple[str, str, str, int]] = []
        self._lock = threading.Lock()
        handler = type("Registry", (_Handler,), {"stand_in": self})
        self.server = ThreadingHTTPServer((address, port), handler)
        self.port = self.server.server_address[1]
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.NamedTemporaryFile("w", suffix=".pem") as pem:
            pem.write(server_pem)
            pem.flush()
            context.load_cert_chain(pem.name)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                        daemon=True)

    def record(self, method: str, path: str, caller: str, status: int) -> None:
        with self._lock:
            self.requests.append((method, path, caller, status))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever() that runs
            self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def hosts_entry(name: str, address: str, hosts: Path = HOSTS) -> Iterator[None]:
    """`address name` in this machine's hosts file while the block runs, then exactly the file as it was: the
    line is appended (after a newline where the file lacks its last one) and removed in a finally. A name the file
    already maps is refused: never shadow someone else's entry."""
    if ipaddress.ip_address(address) not in LOOPBACK:
        raise ValueError(f"{address} is not a loopback address: the stand-in stays on this machine")
    original = hosts.read_text()
    if any(name in line.split("#", 1)[0].split()[1:] for line in original.splitlines()):
        raise RuntimeError(f"{hosts} already maps {name}: remove that entry before the run")
    marker = f"# goldenenv-test registry {uuid.uuid4().hex[:8]}"
    added = ("" if not original or original.endswith("\n") else "\n") + f"{address} {name} {marker}\n"
    with open(hosts, "a") as f:  # in place: the file may be a bind mount
        f.write(added)
    try:
        yield
    finally:
        current = hosts.read_text()
        if current.endswith(added):
            restored = current[:-len(added)]
        else:  # the file changed after ours: take out our line only
            restored = "".join(line for line in current.splitlines(keepends=True) if marker not in line)
        with open(hosts, "w") as f:
            f.write(restored)


def _free_loopback(tries: int = 50) -> str:
    """A 127.0.0.x (not .1) whose port 443 is free."""
    import socket

    for _ in range(tries):
        address = f"127.0.0.{random.randint(100, 250)}"
        with socket.socket() as s:
            try:
                s.bind((address, PORT))
            except OSError:
                continue
            return address
    raise RuntimeError(f"no 127.0.0.x with port {PORT} free after {tries} tries")


@contextlib.contextmanager
def serve(identity: Identity, upstream: str, images: dict[str, str], authority) -> Iterator[RegistryStandIn]:
    """The registry stand-in under identity.name for the block: on a free 127.0.0.x:443, the name mapped there in
    /etc/hosts; both undone at the end, whatever happens. authority: the run's CA (certificates.Authority)."""
    address = _free_loopback()
    stand_in = RegistryStandIn(identity, upstream, images, address, authority.server_pem(identity.name))
    try:
        with hosts_entry(identity.name, address):
            stand_in.start()
            yield stand_in
    finally:
        stand_in.stop()

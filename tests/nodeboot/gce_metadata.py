"""Google Compute Engine's metadata server, for one instance, as Google documents it (stdlib only). Started by
tests/nodeboot/test_emulated_gcp.py in a container on the node's network, under the names a VPC's DNS gives it
(metadata.google.internal, metadata), with the host image's Python:

    python3 gce_metadata.py STATE_FOLDER [PORT]

and in-process by the unit tests (serve()). What it answers, and its sources:

- Every request must carry `Metadata-Flavor: Google`, else 403; a request with `X-Forwarded-For` is refused too;
  every answer carries `Metadata-Flavor: Google` (Compute Engine, "View and query VM metadata": query parameters
  and headers; "Troubleshoot metadata server access": 403 for a request that fails its security checks).
- /computeMetadata/v1/ keys ("Predefined VM metadata keys"): instance/id (a number), instance/hostname
  (<name>.<zone>.c.<project>.internal), instance/name, instance/zone (projects/<project number>/zones/<zone>),
  instance/machine-type (projects/<number>/machineTypes/<type>), instance/network-interfaces/0/ip,
  instance/preempted (TRUE once Google preempts a Spot VM, else FALSE: "Create and use Spot VMs", detect
  preemption), instance/service-accounts/default/email, .../default/token ({"access_token", "expires_in",
  "token_type": "Bearer"}: "Authenticate workloads using service accounts"), project/project-id,
  project/numeric-project-id; instance/attributes/<key> and project/attributes/<key>: the custom metadata (here
  the planned instance's `metadata` input: user-data, enable-oslogin, ...).
- A directory (a path ending in /) lists its entries one a line, subdirectories with a trailing /; with
  ?recursive=true it is the JSON of the whole tree (keys in camelCase, as Google's: networkInterfaces); a value
  is text, or JSON with ?alt=json.
- ?wait_for_change=true holds the request until the value changes, then answers with the new value; with
  last_etag=<ETag> it answers at once if the value already differs from that one; timeout_sec=<n> answers the
  current value after n seconds ("View and query VM metadata": wait for change, ETags, timeouts). Every answer
  carries the value's ETag.

The token: one per service account, the same until it expires, as Google's server caches it; set_token fixes it
(STATE_FOLDER/token.json, what the emulated Google APIs are told to accept: tests/nodeboot/gcp_apis.py), else a
new random one per request.

STATE_FOLDER/instance.json is read on every request (the test switches `preempted` with set_preempted), and every
request is appended to STATE_FOLDER/requests.log as `METHOD PATH flavor=<header or ->`: what the node asked, and how.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PREFIX = "/computeMetadata/v1/"
INSTANCE = "instance.json"
TOKEN = "token.json"
LOG = "requests.log"
WAIT_LIMIT_S = 300
"""How long a wait_for_change without timeout_sec is held at most (Google holds it until the value changes)."""
_WRITE = threading.Lock()


def instance_document(*, name: str, instance_id: int, zone: str, project: str, project_number: int,
                      machine_type: str, ip: str, attributes: dict[str, str], service_account: str,
                      project_attributes: dict[str, str] | None = None) -> dict:
    """The metadata tree of one instance (keys as the server's recursive JSON names them)."""
    return {
        "instance": {
            "id": instance_id, "name": name, "hostname": f"{name}.{zone}.c.{project}.internal",
            "zone": f"projects/{project_number}/zones/{zone}",
            "machineType": f"projects/{project_number}/machineTypes/{machine_type}",
            "networkInterfaces": [{"ip": ip, "network": f"projects/{project_number}/networks/default"}],
            "preempted": "FALSE", "attributes": dict(attributes),
            "serviceAccounts": {"default": {"email": service_account, "scopes": [
                "https://www.googleapis.com/auth/cloud-platform"]}},
        },
        "project": {"projectId": project, "numericProjectId": project_number,
                    "attributes": dict(project_attributes or {})},
    }


def write_state(folder: Path, document: dict) -> None:
    with _WRITE:
        (folder / f"{INSTANCE}.new").write_text(json.dumps(document))
        (folder / f"{INSTANCE}.new").rename(folder / INSTANCE)


def set_preempted(folder: Path, preempted: bool) -> None:
    """Google preempts the VM (TRUE), or it runs on (FALSE)."""
    document = json.loads((folder / INSTANCE).read_text())
    document["instance"]["preempted"] = "TRUE" if preempted else "FALSE"
    write_state(folder, document)


def requests_of(folder: Path) -> list[tuple[str, str, str]]:
    """(method, path with query, Metadata-Flavor header or "-") of every request so far."""
    try:
        lines = (folder / LOG).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(m, p, f.removeprefix("flavor=")) for m, p, f in (line.split(" ", 2) for line in lines)]


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(part.title() for part in rest)


def _lookup(tree, parts: list[str]):
    """The node at `parts` (URL names: network-interfaces, service-accounts; attribute keys as they are)."""
    node = tree
    for i, part in enumerate(parts):
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise KeyError(part)
            node = node[int(part)]
        elif isinstance(node, dict):
            attributes = i > 0 and parts[i - 1] == "attributes"
            key = part if attributes or part in node else _camel(part)
            node = node[key]
        else:
            raise KeyError(part)
    return node


def new_token() -> str:
    """An access token as the metadata server's look (ya29.<opaque>)."""
    return "ya29.emulated-" + hashlib.sha256(os.urandom(16)).hexdigest()[:40]


def set_token(folder: Path, token: str, lifetime_s: int = 3599) -> None:
    """The default service account's access token from now on (until lifetime_s from now)."""
    with _WRITE:
        (folder / f"{TOKEN}.new").write_text(json.dumps({"access_token": token,
                                                         "expires_at": time.time() + lifetime_s}))
        (folder / f"{TOKEN}.new").rename(folder / TOKEN)


def _token(folder: Path) -> dict:
    try:
        fixed = json.loads((folder / TOKEN).read_text())
    except FileNotFoundError:
        return {"access_token": new_token(), "expires_in": 3599, "token_type": "Bearer"}
    return {"access_token": fixed["access_token"], "expires_in": max(0, int(fixed["expires_at"] - time.time())),
            "token_type": "Bearer"}


def _kebab(name: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in name)


def _render(node, recursive: bool, alt: str | None, parts: list[str]) -> tuple[str, str]:
    """(body, content type) of a node: a directory listing, a JSON tree, or a value."""
    is_dir = isinstance(node, (dict, list))
    if is_dir and not recursive and alt != "json":
        if isinstance(node, list):
            entries = [f"{i}/" for i in range(len(node))]
        else:
            keep = parts[-1:] == ["attributes"]
            entries = [(k if keep else _kebab(k)) + ("/" if isinstance(v, (dict, list)) else "")
                       for k, v in node.items()]
        return "".join(e + "\n" for e in entries), "application/text"
    if is_dir or alt == "json":
        return json.dumps(node), "application/json"
    return str(node), "application/text"


def _etag(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:16]


class Handler(BaseHTTPRequestHandler):
    state: Path
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, body: str, kind: str = "text/html", etag: str | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        if etag:
            self.send_header("ETag", etag)
        self.end_headers()
        self.wfile.write(data)

    def _log(self) -> None:
        with _WRITE, open(self.state / LOG, "a") as f:
            f.write(f"{self.command} {self.path} flavor={self.headers.get('Metadata-Flavor') or '-'}\n")

    def do_PUT(self) -> None:  # guest attributes (cloud-init publishes its host keys there): not enabled
        self._log()
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(403, "Guest attributes endpoint access is disabled.\n")

    def do_GET(self) -> None:
        self._log()
        if self.headers.get("Metadata-Flavor") != "Google" or self.headers.get("X-Forwarded-For"):
            return self._send(403, "Your client does not have permission to get URL from this server. Missing "
                                   "Metadata-Flavor:Google header.\n")
        url = urllib.parse.urlsplit(self.path)
        query = {k.lower(): v for k, v in urllib.parse.parse_qsl(url.query)}
        if not url.path.startswith(PREFIX) and url.path != PREFIX.rstrip("/"):
            return self._send(404, "Not Found\n")
        parts = [p for p in url.path[len(PREFIX):].split("/") if p]
        if parts[:3] == ["instance", "service-accounts", "default"] and parts[3:] == ["token"]:
            return self._send(200, json.dumps(_token(self.state)), "application/json")
        recursive = query.get("recursive", "").lower() == "true"
        alt = query.get("alt")

        def current() -> tuple[str, str] | None:
            document = json.loads((self.state / INSTANCE).read_text())
            try:
                node = _lookup(document, parts) if parts else document
            except KeyError:
                return None
            return _render(node, recursive, alt, parts)

        found = current()
        if found is None:
            return self._send(404, "Not Found\n")
        if query.get("wait_for_change", "").lower() == "true":
            seen = query.get("last_etag") or _etag(found[0])
            limit = float(query.get("timeout_sec") or WAIT_LIMIT_S)
            deadline = time.monotonic() + limit
            while _etag(found[0]) == seen and time.monotonic() < deadline:
                time.sleep(0.1)
                found = current() or found
        self._send(200, found[0], found[1], _etag(found[0]))

    def log_message(self, *args) -> None:
        pass


def serve(state: Path, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """The server on (host, port), answering from state/instance.json; serve_forever() is the caller's."""
    handler = type("GceMetadata", (Handler,), {"state": Path(state)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "/state")
    server = serve(folder, "0.0.0.0", int(sys.argv[2]) if len(sys.argv) > 2 else 80)
    print("metadata server ready", flush=True)
    server.serve_forever()

"""The registry stand-in's identity checks (tests/nodeboot/registry_stand_in.py), without an engine: the Docker
token flow as a client walks it, Artifact Registry's grant and denial read from the plan's IAM, and the hosts-file
entry that is always taken out again. The node-boot test (tests/nodeboot/test_emulated_registry.py) runs the same
stand-in under its real name for the engine."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nodeboot"))

import certificates
import registry_stand_in

from goldenenv import plan, stackconfig

REGION = "us-central1"
NAME = "us-central1-docker.pkg.dev"
RESOURCE = "projects/p/locations/us-central1/repositories/r"
DIGEST = "sha256:" + "ab" * 32
MANIFEST = b'{"schemaVersion": 2}'
READER, OTHER = "reader@p.iam.gserviceaccount.com", "other@p.iam.gserviceaccount.com"


class Upstream(BaseHTTPRequestHandler):
    """The anonymous registry: one manifest under `goldenenv`."""

    def do_GET(self):
        found = self.path == f"/v2/goldenenv/manifests/{DIGEST}"
        body = MANIFEST if found else b"{}"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
        self.send_header("Docker-Content-Digest", DIGEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def registry():
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    authority = certificates.Authority.create()
    identity = registry_stand_in.ArtifactRegistry(REGION, {"tok-reader": READER, "tok-other": OTHER},
                                                  {RESOURCE: {READER: ["roles/artifactregistry.reader"]}})
    stand_in = registry_stand_in.RegistryStandIn(identity, f"127.0.0.1:{upstream.server_address[1]}",
                                                 {"p/r/img": "goldenenv"}, "127.0.0.1",
                                                 authority.server_pem(NAME), port=0)
    stand_in.start()
    yield stand_in, authority
    stand_in.stop()
    upstream.shutdown()
    upstream.server_close()


def call(registry, path: str, auth: str | None = None) -> tuple[int, dict, bytes]:
    """One GET by the registry's name (SNI, Host; the certificate checked against the run's CA)."""
    stand_in, authority = registry
    context = ssl.create_default_context(cadata=authority.cert_pem)
    connection = http.client.HTTPSConnection(NAME, stand_in.port, context=context, timeout=10)
    connection.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", stand_in.port), 10),
                                          server_hostname=NAME)
    connection.request("GET", path, headers={"Authorization": auth} if auth else {})
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    return answer.status, dict(answer.getheaders()), body


def bearer(registry, token: str, user: str = "oauth2accesstoken") -> tuple[int, dict]:
    basic = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
    status, _, body = call(registry, f"/v2/token?scope=repository:p/r/img:pull&service={NAME}", basic)
    return status, json.loads(body)


def test_an_anonymous_call_is_challenged_to_the_registrys_token_endpoint(registry):
    status, headers, _ = call(registry, f"/v2/p/r/img/manifests/{DIGEST}")
    assert status == 401
    assert headers["WWW-Authenticate"] == (f'Bearer realm="https://{NAME}/v2/token",service="{NAME}",'
                                           'scope="repository:p/r/img:pull"')


@pytest.mark.parametrize("user, token", [("oauth2accesstoken", "not-issued"), ("_token", "tok-reader")])
def test_a_token_the_metadata_server_did_not_issue_or_another_user_name_gets_no_bearer(registry, user, token):
    status, answer = bearer(registry, token, user)
    assert status == 401 and answer["errors"][0]["code"] == "UNAUTHORIZED"


def test_the_granted_service_account_pulls_the_manifest_by_digest(registry):
    status, answer = bearer(registry, "tok-reader")
    assert status == 200
    status, headers, body = call(registry, f"/v2/p/r/img/manifests/{DIGEST}", f"Bearer {answer['token']}")
    assert (status, body, headers["Docker-Content-Digest"]) == (200, MANIFEST, DIGEST)
    assert registry[0].requests[-1] == ("GET", f"/v2/p/r/img/manifests/{DIGEST}", READER, 200)


def test_a_service_account_without_a_binding_gets_artifact_registrys_denial(registry):
    status, answer = bearer(registry, "tok-other")
    assert status == 200, "Artifact Registry issues the token and checks IAM on each call"
    status, _, body = call(registry, f"/v2/p/r/img/manifests/{DIGEST}", f"Bearer {answer['token']}")
    error = json.loads(body)["errors"][0]
    assert status == 403 and error["code"] == "DENIED"
    assert error["message"] == ('Permission "artifactregistry.repositories.downloadArtifacts" denied on resource '
                                f'"{RESOURCE}" (or it may not exist)')


@pytest.mark.parametrize("role, pulls", [("roles/artifactregistry.reader", True),
                                         ("roles/artifactregistry.writer", True),
                                         ("roles/artifactregistry.repoAdmin", True),
                                         ("roles/artifactregistry.admin", True),
                                         ("roles/storage.objectViewer", False)])
def test_only_artifact_registry_roles_with_download_let_a_pull_through(role, pulls):
    identity = registry_stand_in.ArtifactRegistry(REGION, {}, {RESOURCE: {OTHER: [role]}})
    if pulls:
        identity.authorize(OTHER, "p/r/img")
    else:
        with pytest.raises(registry_stand_in.Denied):
            identity.authorize(OTHER, "p/r/img")
    with pytest.raises(registry_stand_in.Denied, match="repositories/r2"):
        identity.authorize(OTHER, "p/r2/img")  # the grant is on its repository only


def test_the_plans_repository_iam_is_read_per_repository_and_service_account(tmp_path):
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    config = stackconfig.read_stack_file(plan.stack_file("gcp-g2-dev"))
    config["goldenenv:image"] = {**config["goldenenv:image"], "ref": f"{NAME}/x/y/z@{DIGEST}"}
    config["goldenenv:nodes"] = {**config["goldenenv:nodes"], "sshPublicKey": (tmp_path / "id_ed25519.pub")
                                 .read_text().strip()}
    spec = stackconfig.load("gcp-g2-dev", *stackconfig.namespaced(config))
    resources, outputs = plan.run_program("gcp-g2-dev", config, plan.offline_context(spec))
    members = registry_stand_in.artifact_registry_members(resources)
    project, repo = outputs["imageRepository"].split("/")[1:3]
    assert list(members) == [f"projects/{project}/locations/{REGION}/repositories/{repo}"]
    head = next(r for r in resources if r.type == "gcp:compute/instance:Instance" and r.name.endswith("-head"))
    identity = registry_stand_in.ArtifactRegistry(REGION, {}, members)
    identity.authorize(head.props["serviceAccount"]["email"], f"{project}/{repo}/gcp-l4")


def test_the_hosts_entry_is_added_and_the_file_given_back_as_it_was(tmp_path):
    for original in ("127.0.0.1 localhost\n", "127.0.0.1 localhost", ""):
        hosts = tmp_path / "hosts"
        hosts.write_text(original)
        with registry_stand_in.hosts_entry(NAME, "127.0.0.77", hosts):
            lines = hosts.read_text().splitlines()
            assert lines[-1].split()[:2] == ["127.0.0.77", NAME]
            assert [line for line in lines[:-1] if line] == original.splitlines()
        assert hosts.read_text() == original
        with pytest.raises(KeyError), registry_stand_in.hosts_entry(NAME, "127.0.0.77", hosts):
            raise KeyError("the test failed")
        assert hosts.read_text() == original


def test_the_hosts_entry_stays_on_loopback_and_never_shadows_a_name(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text(f"10.0.0.5 {NAME}\n")
    with pytest.raises(RuntimeError, match="already maps"), registry_stand_in.hosts_entry(NAME, "127.0.0.77", hosts):
        pass
    with pytest.raises(ValueError, match="loopback"), registry_stand_in.hosts_entry("x.example", "10.0.0.9", hosts):
        pass
    assert hosts.read_text() == f"10.0.0.5 {NAME}\n"

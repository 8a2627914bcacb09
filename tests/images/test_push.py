"""`image push` against a real registry (Debian's docker-registry, distribution v2) on the local engine."""

from __future__ import annotations

import base64
import io
import secrets
import socket
import time
import urllib.error
import urllib.request

import docker
import pytest
from typer.testing import CliRunner

from goldenenv.cli import app
from goldenenv.images import publish
from goldenenv.images.base import ensure_base
from goldenenv.images.build import build
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import load

REGISTRY_DOCKERFILE = """\
FROM {base}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker-registry \\
      apache2-utils && rm -rf /var/lib/apt/lists/*
RUN sed -i 's|path: /etc/docker/registry$|path: /etc/docker/registry/htpasswd|' /etc/docker/registry/config.yml
CMD htpasswd -Bbn "$REGISTRY_USER" "$REGISTRY_PASSWORD" > /etc/docker/registry/htpasswd \\
 && exec /usr/bin/docker-registry serve /etc/docker/registry/config.yml
"""
MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json",
])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def registry(client):
    """A registry container on 127.0.0.1 with basic auth, as Debian configures it; the password is made here.

    The engine treats loopback registries as insecure-allowed, so no TLS is needed."""
    lock = load("cuda-slim")
    base = ensure_base(client, lock.base, log=lambda m: None)
    image, _ = client.images.build(fileobj=io.BytesIO(REGISTRY_DOCKERFILE.format(base=base).encode()),
                                   tag="goldenenv-test/registry:debian", rm=True, forcerm=True)
    port = _free_port()
    auth = {"username": "goldenenv", "password": secrets.token_hex(16), "registry": f"127.0.0.1:{port}"}
    container = client.containers.run(image.id, detach=True, ports={"5000/tcp": ("127.0.0.1", port)},
                                      environment={"REGISTRY_USER": auth["username"],
                                                   "REGISTRY_PASSWORD": auth["password"]},
                                      labels={"goldenenv.test": "registry"})
    for _ in range(50):
        try:
            urllib.request.urlopen(f"http://{auth['registry']}/v2/", timeout=1)
        except urllib.error.HTTPError:
            break  # 401: up, and asking for credentials
        except OSError:
            time.sleep(0.2)
    yield auth
    container.remove(force=True)


@pytest.fixture(scope="module")
def cuda_slim(client):
    return build(load("cuda-slim"), BuildOptions.from_environment(), client)


def test_push_records_the_digest_the_registry_serves_and_nodes_can_pull_by_it(client, registry, cuda_slim, tmp_path):
    lock = load("cuda-slim")
    (tmp_path / lock.name).mkdir()
    url = registry["registry"]
    with pytest.raises(publish.PushError, match="push to .* failed"):
        publish.push(lock, f"{url}/goldenenv", client, log=lambda m: None, images_dir=tmp_path)
    entry = publish.push(lock, f"{url}/goldenenv", client, auth=registry, log=lambda m: None, images_dir=tmp_path)

    assert entry.repository == f"{url}/goldenenv/cuda-slim" and entry.lock_hash == lock.content_hash
    assert entry.tag == publish.build_tag(lock, client.images.get(lock.tag).id)
    assert served_digest(registry, "goldenenv/cuda-slim", entry.tag) == entry.digest
    assert publish.latest(lock, entry.repository, tmp_path) == entry
    assert f"digest: {entry.digest}" in (tmp_path / lock.name / "published.yaml").read_text()

    client.images.remove(f"{entry.repository}:{entry.tag}")
    pulled = client.images.pull(entry.ref, auth_config=registry)
    assert pulled.id == client.images.get(lock.tag).id


def served_digest(registry: dict, name: str, tag: str) -> str:
    """The digest the registry serves for name:tag (Docker-Content-Digest of the manifest)."""
    basic = base64.b64encode(f"{registry['username']}:{registry['password']}".encode()).decode()
    request = urllib.request.Request(f"http://{registry['registry']}/v2/{name}/manifests/{tag}",
                                     headers={"Accept": MANIFEST_TYPES, "Authorization": f"Basic {basic}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.headers["Docker-Content-Digest"]


def test_two_builds_of_one_lock_are_two_tags_both_still_pullable(client, registry, tmp_path):
    """A rebuild elsewhere (a new image id) pushes beside the first build, not over it: ECR's immutable tags would
    refuse a push under the tag the first build holds (tests/unit/test_image_push.py has ECR's refusal)."""
    from goldenenv.images.base import ensure_base

    lock = load("cuda-slim").model_copy(update={"description": f"two builds {secrets.token_hex(4)}"})
    (tmp_path / lock.name).mkdir()
    base = ensure_base(client, load("cuda-slim").base, log=lambda m: None)
    url = f"{registry['registry']}/goldenenv"
    entries = []
    try:
        for build in ("here", "there"):
            client.images.build(fileobj=io.BytesIO(f"FROM {base}\nLABEL build={build}\n".encode()),
                                           tag=lock.tag, rm=True)
            entries.append(publish.push(lock, url, client, auth=registry, log=lambda m: None, images_dir=tmp_path))
        first, second = entries
        assert first.tag != second.tag and first.digest != second.digest
        for entry in entries:
            assert served_digest(registry, "goldenenv/cuda-slim", entry.tag) == entry.digest
        assert publish.latest(lock, first.repository, tmp_path) == second
    finally:
        for tag in [lock.tag] + [f"{e.repository}:{e.tag}" for e in entries]:
            try:
                client.images.remove(tag)
            except docker.errors.ImageNotFound:
                pass


def test_push_of_an_unbuilt_lock_or_to_a_malformed_registry_says_what_to_do(client, tmp_path):
    lock = load("cuda-slim").model_copy(update={"description": "never built"})
    with pytest.raises(publish.PushError, match="not built here: goldenenv image build cuda-slim"):
        publish.push(lock, "127.0.0.1:5000/goldenenv", client, images_dir=tmp_path)
    result = CliRunner().invoke(app, ["image", "push", "cuda-slim", "--registry", "https://Bad Registry"])
    assert result.exit_code == 1 and "is not host[:port][/path]" in result.output
    result = CliRunner().invoke(app, ["image", "push", "cuda-slim"])
    assert result.exit_code == 2 and "exactly one of --registry" in result.output

"""`image push` against a registry with immutable tags, as the stacks' ECR repositories are.

The engine is a stand-in that speaks the Docker SDK's push stream; its registry refuses a push under a tag it already
holds with the words ECR uses (relayed by the engine as the stream's `error`), whatever the image. A real registry
(Debian's distribution) does not enforce immutable tags, so it cannot show this: tests/images/test_push.py pushes
to one for the rest.
"""

from __future__ import annotations

import hashlib

import docker
import pytest
import yaml

from goldenenv.images import publish
from goldenenv.images.lock import load

REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv/llm-pretrain/aws-p5-2node"
REPOSITORY = f"{REGISTRY}/cuda-slim"
BUILD_HERE = "sha256:" + "1a2b3c4d5e6f" + "0" * 52
BUILD_THERE = "sha256:" + "9f8e7d6c5b4a" + "0" * 52


def immutable_refusal(tag: str, repository: str) -> str:
    """ECR's message for a push under a tag an IMMUTABLE repository already holds (moby/buildkit#3776 quotes it)."""
    name = repository.split("/", 1)[1]
    return (f"tag invalid: The image tag '{tag}' already exists in the '{name}' repository and cannot be "
            "overwritten because the repository is immutable.")


class Image:
    def __init__(self, image_id: str):
        self.id = image_id
        self.tags: list[str] = []

    def tag(self, repository: str, tag: str) -> bool:
        self.tags.append(f"{repository}:{tag}")
        return True


class Registry:
    """An ECR repository with immutable tags: tag -> digest."""

    def __init__(self):
        self.tags: dict[str, str] = {}


class Engine:
    """The Docker SDK's `client.images` as publish.push uses it, on one machine holding one build of the lock."""

    def __init__(self, lock, image_id: str, registry: Registry, inspect_error: Exception | None = None):
        self.images = self
        self.lock, self.image, self.registry, self.inspect_error = lock, Image(image_id), registry, inspect_error
        self.pushed: list[str] = []

    def get(self, name: str) -> Image:
        if name != self.lock.tag:
            raise docker.errors.ImageNotFound(name)
        return self.image

    def push(self, repository: str, tag: str, stream: bool, decode: bool, auth_config=None):
        assert stream and decode
        self.pushed.append(f"{repository}:{tag}")
        yield {"status": f"The push refers to repository [{repository}]"}
        yield {"status": "Layer already exists", "progressDetail": {}, "id": "5f70bf18a086"}
        if tag in self.registry.tags:
            message = immutable_refusal(tag, repository)
            yield {"errorDetail": {"message": message}, "error": message}
            return
        digest = "sha256:" + hashlib.sha256(f"{repository}@{self.image.id}".encode()).hexdigest()
        self.registry.tags[tag] = digest
        yield {"status": f"{tag}: digest: {digest} size: 1573"}
        yield {"progressDetail": {}, "aux": {"Tag": tag, "Digest": digest, "Size": 1573}}

    def get_registry_data(self, name: str, auth_config=None):
        if self.inspect_error:
            raise self.inspect_error
        repository, _, tag = name.rpartition(":")
        assert repository == REPOSITORY
        return type("RegistryData", (), {"id": self.registry.tags[tag]})()


@pytest.fixture
def lock(tmp_path):
    lock = load("cuda-slim")
    (tmp_path / lock.name).mkdir()
    return lock


def push(lock, engine, images_dir, log=lambda m: None):
    return publish.push(lock, REGISTRY, engine, auth={"username": "AWS"}, log=log, images_dir=images_dir)


def test_each_build_of_a_lock_has_its_own_tag_the_lock_hash_and_the_image_id(lock, tmp_path):
    engine = Engine(lock, BUILD_HERE, Registry())
    entry = push(lock, engine, tmp_path)
    assert engine.pushed == [f"{REPOSITORY}:{lock.content_hash}-1a2b3c4d5e6f"]
    assert engine.image.tags == engine.pushed
    assert entry.tag == f"{lock.content_hash}-1a2b3c4d5e6f" and entry.lock_hash == lock.content_hash
    written = yaml.safe_load((tmp_path / lock.name / "published.yaml").read_text())["published"]
    assert written[0]["tag"] == entry.tag and written[0]["digest"] == entry.digest


def test_a_rebuild_on_another_machine_pushes_beside_the_first_and_becomes_what_nodes_pull(lock, tmp_path):
    registry = Registry()
    first = push(lock, Engine(lock, BUILD_HERE, registry), tmp_path)
    second = push(lock, Engine(lock, BUILD_THERE, registry), tmp_path)
    assert second.digest != first.digest and second.tag != first.tag
    assert registry.tags == {first.tag: first.digest, second.tag: second.digest}, "the first build is still there"
    assert publish.latest(lock, REPOSITORY, tmp_path) == second
    assert second.ref == f"{REPOSITORY}@{second.digest}"


def test_pushing_the_same_build_again_records_the_digest_the_registry_holds(lock, tmp_path):
    registry = Registry()
    first = push(lock, Engine(lock, BUILD_HERE, registry), tmp_path)
    said: list[str] = []
    again = push(lock, Engine(lock, BUILD_HERE, registry), tmp_path, log=said.append)
    assert (again.digest, again.tag) == (first.digest, first.tag)
    assert any("already in the registry" in m for m in said)
    assert publish.latest(lock, REPOSITORY, tmp_path) == again


def test_a_taken_tag_whose_digest_cannot_be_read_says_what_to_do(lock, tmp_path):
    registry = Registry()
    push(lock, Engine(lock, BUILD_HERE, registry), tmp_path)
    denied = docker.errors.APIError("inspect", explanation="denied: not authorized to perform ecr:BatchGetImage")
    with pytest.raises(publish.PushError) as caught:
        push(lock, Engine(lock, BUILD_HERE, registry, inspect_error=denied), tmp_path)
    message = str(caught.value)
    assert "immutable" in message and "ecr:BatchGetImage" in message
    assert "aws ecr describe-images --repository-name goldenenv/llm-pretrain/aws-p5-2node/cuda-slim" in message
    assert "image.ref" in message


def test_other_registry_errors_still_fail_the_push_with_the_registrys_words(lock, tmp_path):
    class Refusing(Engine):
        def push(self, repository, tag, stream, decode, auth_config=None):
            yield {"errorDetail": {"message": "denied: Your authorization token has expired."},
                   "error": "denied: Your authorization token has expired."}

    with pytest.raises(publish.PushError, match="push to .* failed: denied: Your authorization token has expired"):
        push(lock, Refusing(lock, BUILD_HERE, Registry()), tmp_path)
    assert not (tmp_path / lock.name / "published.yaml").exists()


def test_records_written_before_tags_carried_the_image_id_still_read(lock, tmp_path):
    (tmp_path / lock.name / "published.yaml").write_text(yaml.safe_dump({"published": [{
        "repository": REPOSITORY, "digest": "sha256:" + "c" * 64, "lock_hash": lock.content_hash,
        "pushed_at": "2026-01-01T00:00:00+00:00", "compressed_bytes": 10}]}))
    (old,) = publish.records(lock.name, tmp_path)
    assert old.tag is None and publish.latest(lock, REPOSITORY, tmp_path) == old

"""Supply chain: signed bases, and a site mirror's credentials nowhere in the image.

debootstrap must refuse a release whose signature does not check against the distribution's keyring. A build
given `--apt-mirror http://user:password@mirror/...` uses that mirror, yet the image's apt sources name the
lock's canonical mirror, and the password is in none of its files, its history or its config.
"""

from __future__ import annotations

import dataclasses
import io
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
import yaml
from docker.errors import ImageNotFound

from goldenenv.images import base as base_module
from goldenenv.images.base import BaseError, bootstrap
from goldenenv.images.build import build_context, remove_builders
from goldenenv.images.dockerfile import BuildOptions, build_args, write_context
from goldenenv.images.lock import IMAGES, Bootstrap, load

PASSWORD = "s3cr3t-" + uuid.uuid4().hex[:8]
MIRROR = f"http://goldenenv:{PASSWORD}@deb.debian.org/debian"
"""deb.debian.org answers requests that carry credentials as it answers any other (they are ignored)."""
CANONICAL = "deb http://deb.debian.org/debian bookworm main\n"
DEBIAN = Bootstrap(distro="debian", release="bookworm", mirror="http://deb.debian.org/debian",
                   packages=["python3", "python3-venv", "ca-certificates"])


def positional(cmd: list[str]) -> list[str]:
    """debootstrap's SUITE TARGET MIRROR [SCRIPT], after its --options."""
    return [arg for arg in cmd[1:] if not arg.startswith("--")]


class FakeDebootstrap:
    """Records the command and leaves what debootstrap leaves: its log and apt files naming the mirror it used."""

    def __init__(self):
        self.cmd: list[str] = []

    def __call__(self, cmd, **kwargs):
        self.cmd = cmd
        _, rootfs, mirror = positional(cmd)[:3]
        rootfs = Path(rootfs)
        for folder in ("etc/apt/sources.list.d", "var/log", "var/lib/apt/lists/partial", "var/cache/apt/archives"):
            (rootfs / folder).mkdir(parents=True, exist_ok=True)
        (rootfs / "etc/apt/sources.list").write_text(f"deb {mirror} bookworm main\n")
        (rootfs / "var/log/bootstrap.log").write_text(f"URL:{mirror}/dists/bookworm/InRelease\n")
        host = mirror.split("//", 1)[1].replace("/", "_")
        (rootfs / f"var/lib/apt/lists/partial/{host}_dists_bookworm_InRelease").write_text("signed")
        (rootfs / "var/cache/apt/archives/apt_2.6.1_amd64.deb").write_bytes(b"deb")
        (rootfs / "bin").mkdir()
        (rootfs / "bin/sh").write_text("#!")
        return subprocess.CompletedProcess(cmd, 0, "I: Base system installed successfully.\n", "")


class FakeClient:
    """Keeps the rootfs tarball that `docker import` would receive."""

    def __init__(self):
        self.members: dict[str, bytes] = {}
        self.api = self

    def import_image_from_file(self, path, repository, tag, changes):
        with tarfile.open(path) as tar:
            self.members = {m.name: tar.extractfile(m).read() if m.isfile() else b"" for m in tar.getmembers()}


@pytest.fixture
def fake_debootstrap(monkeypatch) -> FakeDebootstrap:
    fake = FakeDebootstrap()
    monkeypatch.setattr(base_module.subprocess, "run", fake)
    monkeypatch.setattr(base_module.shutil, "which",
                        lambda name: f"/usr/sbin/{name}" if name == "debootstrap" else None)
    return fake


@pytest.mark.parametrize(("distro", "release", "keyring"), [
    ("debian", "bookworm", "/usr/share/keyrings/debian-archive-keyring.gpg"),
    ("ubuntu", "noble", "/usr/share/keyrings/ubuntu-archive-keyring.gpg"),
])
def test_debootstrap_refuses_a_release_whose_signature_does_not_check(fake_debootstrap, distro, release, keyring):
    """The keyrings are installed next to debootstrap by scripts/start-docker.sh."""
    spec = Bootstrap(distro=distro, release=release, mirror="http://mirror.example/" + distro)
    bootstrap(FakeClient(), spec, "goldenenv-test/base:fake", spec.mirror)
    assert "--force-check-gpg" in fake_debootstrap.cmd
    assert f"--keyring={keyring}" in fake_debootstrap.cmd
    assert positional(fake_debootstrap.cmd)[0] == release


def test_a_missing_keyring_says_which_package_to_install(fake_debootstrap, monkeypatch):
    monkeypatch.setitem(base_module.KEYRINGS, "ubuntu",
                        (Path("/nonexistent/ubuntu-archive-keyring.gpg"), "ubuntu-keyring"))
    spec = Bootstrap(distro="ubuntu", release="jammy", mirror="http://archive.ubuntu.com/ubuntu")
    with pytest.raises(BaseError, match="install the ubuntu-keyring package"):
        bootstrap(FakeClient(), spec, "goldenenv-test/base:fake", spec.mirror)
    assert fake_debootstrap.cmd == [], "nothing is bootstrapped unverified"


def test_the_base_names_the_canonical_mirror_whatever_mirror_bootstrapped_it(fake_debootstrap):
    client = FakeClient()
    bootstrap(client, DEBIAN, "goldenenv-test/base:fake", MIRROR)
    assert positional(fake_debootstrap.cmd)[2] == MIRROR, "the site mirror is what debootstrap downloads from"
    assert client.members["./etc/apt/sources.list"].decode() == CANONICAL
    leaks = [name for name, data in client.members.items() if PASSWORD in name or PASSWORD.encode() in data]
    assert leaks == []
    assert "./bin/sh" in client.members


@pytest.fixture(scope="module")
def mirrored_build(client, tmp_path_factory):
    """A real base debootstrapped from MIRROR, and a tiny image with one OS package built with --apt-mirror MIRROR."""
    run_id = uuid.uuid4().hex[:8]
    base_ref = f"goldenenv-test/supply-chain-base:{run_id}"
    doc = yaml.safe_load((IMAGES / "cuda-slim" / "lock.yaml").read_text())
    doc.update(name=f"supply-chain-{run_id}", description="supply chain test: one OS package, pip only",
               requirements={"project": ["pip"]}, packages={"pip": doc["packages"]["pip"]})
    for key in ("cuda", "nccl", "gpuArchs"):
        doc.pop(key)
    doc["base"]["bootstrap"]["packages"] = DEBIAN.packages
    doc["base"]["osPackages"] = ["less"]
    images = tmp_path_factory.mktemp("images")
    (images / doc["name"]).mkdir()
    (images / doc["name"] / "lock.yaml").write_text(yaml.safe_dump(doc))
    lock = load(doc["name"], images)
    options = dataclasses.replace(BuildOptions.from_environment(), apt_mirror=MIRROR)
    try:
        bootstrap(client, lock.base.bootstrap, base_ref, MIRROR)
        context = write_context(lock, base_ref, options, tmp_path_factory.mktemp("context"))
        built = build_context(client, context, lock.tag, lock.name, build_args(options), log=lambda m: None)
        yield lock, built
    finally:
        remove_builders(client, lock.name)
        for ref in (lock.tag, base_ref):
            try:
                client.images.remove(ref)
            except ImageNotFound:
                pass


def test_the_mirror_was_used_in_the_apt_builder_stage_only(client, mirrored_build):
    lock, built = mirrored_build
    apt_stage = client.images.get(f"goldenenv-builder/{lock.name}:apt")
    assert any(PASSWORD in (step.get("CreatedBy") or "") for step in apt_stage.history()), \
        "the apt builder stage downloads through the site mirror"
    assert set(built.stages) >= {"apt", "os"}


def test_the_mirror_credentials_are_not_in_the_image_history_or_config(client, mirrored_build):
    lock, _ = mirrored_build
    history = subprocess.run(["docker", "history", "--no-trunc", lock.tag], capture_output=True, text=True,
                             check=True).stdout
    assert "goldenenv-debs" in history and PASSWORD not in history
    config = subprocess.run(["docker", "image", "inspect", lock.tag], capture_output=True, text=True,
                            check=True).stdout
    assert PASSWORD not in config


def test_the_image_apt_sources_are_canonical_and_no_file_holds_the_credentials(client, mirrored_build):
    lock, _ = mirrored_build
    script = (
        "dpkg -s less >/dev/null && echo installed; "
        "cat /etc/apt/sources.list; ls /etc/apt/sources.list.d; "
        f"grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev {PASSWORD} / ; "
        f"find / -xdev -name '*{PASSWORD}*'"
    )
    out = client.containers.run(lock.tag, ["sh", "-c", script], user="root", remove=True).decode()
    assert out == "installed\n" + CANONICAL, out
    assert PASSWORD not in out


def test_the_tarball_of_the_image_holds_no_credentials(client, mirrored_build):
    """Every layer, including files a later step deleted, as `docker save` exports them."""
    lock, _ = mirrored_build
    stream = io.BytesIO(b"".join(client.images.get(lock.tag).save(named=False)))
    with tarfile.open(fileobj=stream) as image:
        layers = 0
        for member in (m for m in image.getmembers() if m.isfile()):
            data = image.extractfile(member).read()
            assert PASSWORD.encode() not in data, member.name
            if data[257:262] == b"ustar":
                layers += 1
                with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                    assert not [n for n in layer.getnames() if PASSWORD in n], member.name
    assert layers >= 3, "the base, the OS packages and the user are layers of the image"

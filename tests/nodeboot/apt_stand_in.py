"""The vendors' apt repositories of a host lock, on this machine, as a node's install step meets them.

For each repository the lock's components use on one OS family: dummy packages (dpkg-deb; Architecture: all, no
dependencies) with the vendor's names and the lock's versions, a Packages index, a Release file listing its hashes,
clearsigned into InRelease with an OpenPGP key made for the run (gpg in batch mode), and that key published at the
repository. A flat repository (suite `/`, NVIDIA's) has them at its root; a suite (Docker's jammy) under dists/.
Served over HTTPS from a container of the emulated host's image on the host's network, under one name, with a
certificate of the run's CA. project_lock() is the host lock the test's project uses: the shipped one with each
repository at the stand-in and pinned to the run's key (or to another key, to see it refused).
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import io
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker

from goldenenv.images.host import HostLock

NAME = "apt.goldenenv.test"
"""The stand-in's name on the host's network (Docker's DNS); every repository is a folder under it."""
ARCHITECTURE = "amd64"
SERVER = """\
import functools, http.server, ssl, sys
root, pem = sys.argv[1], sys.argv[2]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
server = http.server.ThreadingHTTPServer(("", 443), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(pem)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("apt repository ready", flush=True)
server.serve_forever()
"""
DOCKER_CLI = "/usr/libexec/emulated/docker"
"""Where the emulated host keeps a copy of Debian's docker CLI: docker.io conflicts with Docker's packages and goes
when they are installed, and the stand-in docker-ce-cli's /usr/bin/docker (as Docker's has one) runs the copy."""
PACKAGE_FILES = {"docker-ce-cli": {"usr/bin/docker": f'#!/bin/sh\nexec {DOCKER_CLI} "$@"\n'}}
"""What a stand-in package installs besides its note, where the emulated host runs it as the vendor's."""
HOST_DOCKERFILE = """\
FROM {image}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gnupg \\
 && rm -rf /var/lib/apt/lists/* && mkdir -p {cli_dir} && cp /usr/bin/docker {cli}
"""
"""gpg, which Ubuntu's cloud images carry and Debian's minimal one lacks (the install step reads key fingerprints
with it), and the copy of the docker CLI."""


@dataclass(frozen=True)
class SigningKey:
    """An OpenPGP signing key made for the run, in its own gpg home."""

    home: Path
    fingerprint: str

    def gpg(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["gpg", "--homedir", str(self.home), "--batch", "--yes", *args], check=True,
                              capture_output=True, **kw)

    def armored(self) -> bytes:
        return self.gpg("--armor", "--export", self.fingerprint).stdout


def make_key(home: Path, uid: str = "goldenenv stand-in repository <apt@goldenenv.test>") -> SigningKey:
    home.mkdir(mode=0o700, parents=True)
    key = SigningKey(home, "")
    key.gpg("--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
    listed = key.gpg("--with-colons", "--list-secret-keys").stdout.decode()
    fingerprint = next(line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:"))
    return SigningKey(home, fingerprint)


def dummy_deb(folder: Path, name: str, version: str) -> Path:
    """A package with the vendor's name and the lock's version that installs only a note of what it stands for."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        (root / "DEBIAN" / "control").write_text(
            f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: goldenenv tests <t@goldenenv.test>\n"
            f"Description: stand-in for {name} {version}\n")
        doc = root / "usr" / "share" / "doc" / name
        doc.mkdir(parents=True)
        (doc / "goldenenv-stand-in").write_text(f"{name} {version}\n")
        for path, content in PACKAGE_FILES.get(name, {}).items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(content)
            (root / path).chmod(0o755)
        path = folder / f"{name}_{version.replace(':', '%3a')}_all.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(path)], check=True,
                       capture_output=True)
    return path


def _stanza(deb: Path, filename: str) -> str:
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout
    data = deb.read_bytes()
    return (control.rstrip("\n") + f"\nFilename: {filename}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n")


def _release(folder: Path, indexes: list[Path], key: SigningKey, suite: str | None, components: list[str]) -> None:
    """Release with the indexes' hashes (paths relative to `folder`), clearsigned into InRelease."""
    lines = ["Origin: goldenenv stand-in", "Label: goldenenv stand-in",
             f"Date: {email.utils.formatdate(time.time() - 60, usegmt=True)}"]
    if suite:
        lines += [f"Suite: {suite}", f"Codename: {suite}", f"Architectures: {ARCHITECTURE} all",
                  f"Components: {' '.join(components)}"]
    lines.append("SHA256:")
    for index in indexes:
        data = index.read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {index.relative_to(folder)}")
    (folder / "Release").write_text("\n".join(lines) + "\n")
    key.gpg("--local-user", key.fingerprint, "--clearsign", "--output", str(folder / "InRelease"),
            str(folder / "Release"))


def _indexes(folder: Path, stanzas: list[str]) -> list[Path]:
    text = "\n".join(stanzas).encode()
    (folder / "Packages").write_bytes(text)
    (folder / "Packages.gz").write_bytes(gzip.compress(text, mtime=0))
    return [folder / "Packages", folder / "Packages.gz"]


def build(root: Path, lock: HostLock, family: str, key: SigningKey,
          versions: dict[str, list[str]] | None = None) -> dict[str, dict[str, str]]:
    """Every repository the lock's components use on `family`, under root/<repository>/, signed with `key` and its
    key published at root/<repository>/key.asc; `versions`: more versions of a package beside the lock's (name ->
    versions). Returns repository -> {package: the lock's version}."""
    served: dict[str, dict[str, str]] = {}
    for component in lock.components.values():
        if family in component.packages:
            served.setdefault(component.repository, {}).update(component.packages[family])
    for name, packages in served.items():
        folder = root / name
        source = lock.repositories[name].sources[family]
        pool = folder / "pool" if source.suite != "/" else folder
        pool.mkdir(parents=True, exist_ok=True)
        debs = [dummy_deb(pool, package, version) for package, version in packages.items()]
        debs += [dummy_deb(pool, package, other) for package, others in (versions or {}).items()
                 if package in packages for other in others]
        (folder / "key.asc").write_bytes(key.armored())
        if source.suite == "/":
            _release(folder, _indexes(folder, [_stanza(d, f"./{d.name}") for d in debs]), key, None, [])
            continue
        dist = folder / "dists" / source.suite.rstrip("/")
        indexes = []
        for component in source.components or ["main"]:
            binary = dist / component / f"binary-{ARCHITECTURE}"
            binary.mkdir(parents=True)
            indexes += _indexes(binary, [_stanza(d, str(d.relative_to(folder))) for d in debs])
        _release(dist, indexes, key, source.suite.rstrip("/"), source.components or ["main"])
    return served


def project_lock(lock: HostLock, fingerprint: str, wrong: dict[str, str] | None = None) -> dict:
    """The host lock as a project writes it, each repository at the stand-in (https://NAME/<repository>) and pinned
    to `fingerprint`; `wrong`: repository -> another fingerprint pinned instead."""
    doc = lock.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    for name, repository in doc["repositories"].items():
        repository["keyUrl"] = f"https://{NAME}/{name}/key.asc"
        repository["fingerprint"] = (wrong or {}).get(name, fingerprint)
        for source in repository["sources"].values():
            source["url"] = f"https://{NAME}/{name}"
    return doc


def host_image(client: docker.DockerClient, image: str) -> str:
    """The emulated host's image as a node whose install step meets the stand-in: gpg, and the docker CLI's copy."""
    text = HOST_DOCKERFILE.format(image=image, cli=DOCKER_CLI, cli_dir=DOCKER_CLI.rsplit("/", 1)[0])
    tag = f"{image.rsplit(':', 1)[0]}:{image.rsplit(':', 1)[-1]}-apt-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        client.images.build(fileobj=io.BytesIO(text.encode()), tag=tag, rm=True, forcerm=True)
    return tag


def serve(client: docker.DockerClient, image: str, root: Path, network, authority):
    """The repositories under `root` over HTTPS at https://NAME/ on `network`; the server's container (its log
    lists each request)."""
    tls = Path(tempfile.mkdtemp(prefix="apt-tls-"))
    (tls / "server.pem").write_text(authority.server_pem(NAME))
    server = client.containers.run(
        image, entrypoint=["python3", "-c", SERVER, "/repository", "/tls/server.pem"], detach=True,
        name=f"ge-apt-{uuid.uuid4().hex[:4]}", labels={"goldenenv.test": "apt-stand-in"},
        volumes={str(root): {"bind": "/repository", "mode": "ro"}, str(tls): {"bind": "/tls", "mode": "ro"}})
    network.connect(server, aliases=[NAME])
    deadline = time.monotonic() + 30
    while b"apt repository ready" not in server.logs():
        server.reload()
        if server.status == "exited" or time.monotonic() > deadline:
            server.remove(force=True)
            raise RuntimeError(f"the apt stand-in did not start:\n{server.logs().decode()}")
        time.sleep(0.2)
    return server

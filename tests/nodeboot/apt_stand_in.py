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
import platform
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
import yaml

import emulated_host
import stand_ins
from goldenenv.images.host import HOSTS, HostLock

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


def dummy_deb(folder: Path, name: str, version: str, modules: tuple[str, ...] = ()) -> Path:
    """A package with the vendor's name and the lock's version that installs a note of what it stands for (and
    PACKAGE_FILES); `modules`: the kernel modules it provides, which its postinst makes the emulated host's
    modprobe know (stand_ins.CONFIG/modules), as a vendor's module package makes them loadable. A package already
    in the folder is kept: suites share a pool, and a second build (its files' times differ) would no longer match
    the index the first suite wrote ("Hash Sum mismatch" at the host's install)."""
    deb = folder / f"{name}_{version.replace(':', '%3a')}_all.deb"
    if deb.exists():
        return deb
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        (root / "DEBIAN" / "control").write_text(
            f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: goldenenv tests <t@goldenenv.test>\n"
            f"Description: stand-in for {name} {version}\n")
        if modules:
            listed = f"{stand_ins.CONFIG}/modules"
            lines = "".join(f"grep -qx {m} {listed} 2>/dev/null || echo {m} >> {listed}\n" for m in modules)
            (root / "DEBIAN" / "postinst").write_text(f"#!/bin/sh\nset -e\nmkdir -p {stand_ins.CONFIG}\n{lines}")
            (root / "DEBIAN" / "postinst").chmod(0o755)
        doc = root / "usr" / "share" / "doc" / name
        doc.mkdir(parents=True)
        (doc / "goldenenv-stand-in").write_text(f"{name} {version}\n")
        for path, content in PACKAGE_FILES.get(name, {}).items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(content)
            (root / path).chmod(0o755)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)], check=True,
                       capture_output=True)
    return deb


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


def served_packages(lock: HostLock, families: list[str], kernel: str) -> dict[str, dict[str, list]]:
    """repository -> suite -> [(package, version, modules)] the lock's components install on `families`, kernel
    packages named for `kernel` (the emulated host's: this machine's)."""
    served: dict[str, dict[str, list]] = {}
    for component in lock.components.values():
        for family in families:
            if family not in component.packages:
                continue
            suite = lock.repositories[component.repository].sources[family].suite
            packages = [(n, v, ()) for n, v in component.packages[family].items()]
            packages += [(f"{n}-{kernel}", v, ()) for n, v in component.kernel_packages.get(family, {}).items()]
            if component.modules and packages:
                name, version, _ = packages[-1]
                packages[-1] = (name, version, tuple(component.modules))
            found = served.setdefault(component.repository, {}).setdefault(suite, [])
            found += [p for p in packages if p not in found]
    return served


def build(root: Path, lock: HostLock, families: list[str], key: SigningKey, kernel: str = platform.release(),
          versions: dict[str, list[str]] | None = None) -> None:
    """Every repository the lock's components use on `families`, under root/<repository>/, signed with `key` and
    its key published at root/<repository>/key.asc; `versions`: more versions of a package beside the lock's
    (name -> versions)."""
    for name, suites in served_packages(lock, families, kernel).items():
        folder = root / name
        (folder / "pool").mkdir(parents=True, exist_ok=True)
        (folder / "key.asc").write_bytes(key.armored())
        for suite, packages in suites.items():
            pool = folder if suite == "/" else folder / "pool"
            debs = [dummy_deb(pool, package, version, modules) for package, version, modules in packages]
            debs += [dummy_deb(pool, package, other, modules) for package, _, modules in packages
                     for other in (versions or {}).get(package, [])]
            if suite == "/":
                _release(folder, _indexes(folder, [_stanza(d, f"./{d.name}") for d in debs]), key, None, [])
                continue
            components = next(s.components for r in [lock.repositories[name]] for s in r.sources.values()
                              if s.suite == suite) or ["main"]
            dist = folder / "dists" / suite.rstrip("/")
            indexes = []
            for component in components:
                binary = dist / component / f"binary-{ARCHITECTURE}"
                binary.mkdir(parents=True, exist_ok=True)
                indexes += _indexes(binary, [_stanza(d, str(d.relative_to(folder))) for d in debs])
            _release(dist, indexes, key, suite.rstrip("/"), components)


def project_lock(lock: HostLock, fingerprint: str, wrong: dict[str, str] | None = None, host: str = NAME) -> dict:
    """The host lock as a project writes it, each repository at the stand-in (https://<host>/<repository>) and
    pinned to `fingerprint`; `wrong`: repository -> another fingerprint pinned instead."""
    doc = lock.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    for name, repository in doc["repositories"].items():
        repository["keyUrl"] = f"https://{host}/{name}/key.asc"
        repository["fingerprint"] = (wrong or {}).get(name, fingerprint)
        for source in repository["sources"].values():
            source["url"] = f"https://{host}/{name}"
    return doc


def host_image(client: docker.DockerClient, image: str) -> str:
    """The emulated host's image as a node whose install step meets the stand-in: gpg, and the docker CLI's copy."""
    text = HOST_DOCKERFILE.format(image=image, cli=DOCKER_CLI, cli_dir=DOCKER_CLI.rsplit("/", 1)[0])
    return emulated_host.built(client, text, f"{image.rsplit(':', 1)[0]}:{image.rsplit(':', 1)[-1]}-apt-"
                                             f"{hashlib.sha256(text.encode()).hexdigest()[:8]}")


def serve(client: docker.DockerClient, image: str, root: Path, network, authority, host: str = NAME):
    """The repositories under `root` over HTTPS at https://<host>/ on `network` (None: StandIn.attach joins networks
    later); the server's container (its log lists each request)."""
    tls = Path(tempfile.mkdtemp(prefix="apt-tls-"))
    (tls / "server.pem").write_text(authority.server_pem(host))
    server = client.containers.run(
        image, entrypoint=["python3", "-c", SERVER, "/repository", "/tls/server.pem"], detach=True,
        name=f"ge-apt-{uuid.uuid4().hex[:4]}", labels={"goldenenv.test": "apt-stand-in"},
        volumes={str(root): {"bind": "/repository", "mode": "ro"}, str(tls): {"bind": "/tls", "mode": "ro"}})
    if network is not None:
        network.connect(server, aliases=[host])
    return emulated_host.started(server, b"apt repository ready", "apt stand-in")


@dataclass
class StandIn:
    """A host lock's repositories served for a run's emulated hosts (every OS family), and the images folder whose
    host lock points there: goldenenv.images.lock.IMAGES for the run, so the nodes' user data installs from here."""

    server: object
    images: Path
    key: SigningKey

    def attach(self, network) -> None:
        """Join a stack's network (once, however many of its hosts ask): its hosts resolve NAME to the stand-in."""
        network.reload()
        if self.server.id not in {c.id for c in network.containers}:
            network.connect(self.server, aliases=[NAME])

    def remove(self) -> None:
        self.server.remove(force=True)


def start(client: docker.DockerClient, image: str, folder: Path, authority, lock: HostLock) -> StandIn:
    families = sorted({family for component in lock.components.values() for family in component.packages})
    key = make_key(folder / "key")
    build(folder / "repository", lock, families, key)
    images = folder / "images"
    (images / HOSTS).mkdir(parents=True)
    (images / HOSTS / f"{lock.name}.yaml").write_text(yaml.safe_dump(project_lock(lock, key.fingerprint)))
    return StandIn(serve(client, image, folder / "repository", None, authority), images, key)


@contextmanager
def serving(stand_in: StandIn, authority) -> Iterator[StandIn]:
    """The stand-in for every emulated host made meanwhile (a node-boot test module, the boot benchmark): the user
    data rendered meanwhile installs the host layer from here (goldenenv.images.lock.IMAGES is the folder whose host
    lock is pinned to the run's key), each host's first network reaches the stand-in under NAME, and each host trusts
    the run's CA, which signed its certificate. Everything is as it was afterwards."""
    from goldenenv.images import lock as image_lock

    create = emulated_host.Host.create.__func__

    def attached(cls, client, image, *, networks, trusted_ca=None, **kw):
        stand_in.attach(client.networks.get(networks[0]))
        bundle = authority.cert_pem if trusted_ca in (None, authority.cert_pem) else trusted_ca + authority.cert_pem
        return create(cls, client, image, networks=networks, trusted_ca=bundle, **kw)

    images = image_lock.IMAGES
    emulated_host.Host.create, image_lock.IMAGES = classmethod(attached), stand_in.images
    try:
        yield stand_in
    finally:
        emulated_host.Host.create, image_lock.IMAGES = classmethod(create), images

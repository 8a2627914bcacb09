"""Registry-free bases: debootstrap a distribution release, then `docker import` it.

For sites where Docker Hub, nvcr or ECR cannot be reached. The base is tagged by what it
contains (distribution, release, packages), so it is built once and reused.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from goldenenv.images.lock import Base, Bootstrap

COMPONENTS = {"debian": "main", "ubuntu": "main,universe"}


class BaseError(RuntimeError):
    """The base could not be pulled or bootstrapped; the message says what to do."""


def bootstrap_tag(spec: Bootstrap) -> str:
    identity = json.dumps({"distro": spec.distro, "release": spec.release, "packages": sorted(spec.packages)})
    return f"goldenenv/base-{spec.distro}-{spec.release}:{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def ensure_base(client: docker.DockerClient, base: Base, apt_mirror: str | None = None, log=print) -> str:
    """The local reference of the lock's base: pulled by digest, or bootstrapped once and reused."""
    if base.image:
        try:
            client.images.get(base.image)
        except ImageNotFound:
            try:
                client.images.pull(base.image)
            except docker.errors.APIError as e:
                raise BaseError(
                    f"cannot pull {base.image} ({e.explanation}); use a registry mirror, or a bootstrap base "
                    "(base.bootstrap: distro, release, mirror) built from distribution packages"
                ) from None
        return base.image
    tag = bootstrap_tag(base.bootstrap)
    try:
        client.images.get(tag)
        return tag
    except ImageNotFound:
        pass
    log(f"bootstrapping {base.bootstrap.distro} {base.bootstrap.release} from packages (no registry needed)")
    bootstrap(client, base.bootstrap, tag, apt_mirror or base.bootstrap.mirror)
    return tag


def bootstrap(client: docker.DockerClient, spec: Bootstrap, tag: str, mirror: str) -> None:
    if shutil.which("debootstrap") is None:
        raise BaseError("debootstrap is not installed (Debian/Ubuntu: apt-get install debootstrap)")
    with tempfile.TemporaryDirectory(prefix="goldenenv-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--components={COMPONENTS[spec.distro]}"]
        if spec.packages:
            cmd.append("--include=" + ",".join(spec.packages))
        done = subprocess.run(cmd + [spec.release, str(rootfs), mirror], capture_output=True, text=True)
        if done.returncode != 0:
            tail = " | ".join(done.stdout.strip().splitlines()[-3:] + done.stderr.strip().splitlines()[-2:])
            raise BaseError(f"debootstrap {spec.release} from {mirror} failed: {tail}")
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / leftover).glob("*"):
                if entry.is_file():
                    entry.unlink()
        archive = Path(tmp) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(rootfs, arcname=".")
        repository, _, version = tag.partition(":")
        client.api.import_image_from_file(
            str(archive), repository=repository, tag=version, changes=['CMD ["/bin/bash"]', "ENV LANG=C.UTF-8"],
        )

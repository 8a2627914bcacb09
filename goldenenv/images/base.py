"""Registry-free bases: bootstrap a distribution release (mmdebstrap or debootstrap), then `docker import` it.

For sites where Docker Hub, nvcr or ECR cannot be reached. The base is tagged by what it
contains (distribution, release, packages), so it is built once and reused. The bootstrap checks the
release's signature against the distribution's keyring (plain http is fine then: every package is
verified through the signed Release file), and the base's apt source is the lock's canonical mirror,
never the site mirror the build used nor its credentials.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
import urllib.parse
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from goldenenv.images.lock import Base, Bootstrap
from goldenenv.progress import Steps

COMPONENTS = {"debian": "main", "ubuntu": "main,universe"}
POCKETS = {"debian": ("",), "ubuntu": ("", "-updates", "-security")}
"""The suites a base's apt reads, as suffixes of its release. Debian folds its fixes into the release at each point
release; Ubuntu never does: they stay in RELEASE-updates and RELEASE-security, where a lock's OS pins may come from
(noble's munge 0.5.15-4ubuntu0.1 is in noble-updates and noble-security only)."""
BOOTSTRAPPERS = ("mmdebstrap", "debootstrap")
"""What makes a base's root file system, the first one installed here. mmdebstrap downloads with apt, several packages
at once, and is 3-6 times faster than debootstrap (https://packages.debian.org/bookworm/mmdebstrap); on a 2-core
machine under load cpu-dev's bookworm base took it 39 s against debootstrap's 86 s (scripts/bench_first_run.py).
Both refuse a release whose signature does not check against the distribution's keyring."""
MERGED_USR_HOOK = "/usr/share/mmdebstrap/hooks/maybe-merged-usr"
"""mmdebstrap's hook that merges /usr as the release expects and installs usr-is-merged. Without it apt satisfies
init-system-helpers' `usrmerge | usr-is-merged` with usrmerge, which pulls in perl: 8 more packages and 48 MB more
than debootstrap's base. With it the package set is debootstrap's (checked with dpkg -l on bookworm)."""
DEBOOTSTRAP_SCRIPTS = Path("/usr/share/debootstrap/scripts")
UBUNTU_SCRIPT = "gutsy"
"""debootstrap bootstraps every Ubuntu release since 7.10 with this script, which newer debootstraps link each release
name to; an older one (Debian 12's 1.0.128) has no link for a newer release (noble), so it is named instead."""
KEYRINGS = {
    "debian": (Path("/usr/share/keyrings/debian-archive-keyring.gpg"), "debian-archive-keyring"),
    "ubuntu": (Path("/usr/share/keyrings/ubuntu-archive-keyring.gpg"), "ubuntu-keyring"),
}
"""The archive keyring that signs each distribution's releases, and the Debian package that ships it."""


class BaseError(RuntimeError):
    """The base could not be pulled or bootstrapped; the message says what to do."""


def bootstrap_tag(spec: Bootstrap) -> str:
    identity = {"distro": spec.distro, "release": spec.release, "packages": sorted(spec.packages)}
    if POCKETS[spec.distro] != ("",):  # a base bootstrapped before its apt read these is not this one
        identity["pockets"] = list(POCKETS[spec.distro])
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:12]
    return f"goldenenv/base-{spec.distro}-{spec.release}:{digest}"


def ensure_base(client: docker.DockerClient, base: Base, apt_mirror: str | None = None, log=print,
                steps: Steps | None = None) -> str:
    """The local reference of the lock's base: pulled by digest, or bootstrapped once and reused. A pull, the
    debootstrap and the import are each a step of `steps` (a line with its seconds, a heartbeat while it runs)."""
    steps = steps or Steps(log)
    if base.unverified_image:
        raise BaseError(f"{base.unverified_image} is pinned by tag only (base.unverifiedImage): a build from it could "
                        "be any image that tag names at the time; read its digest from the registry and write "
                        "base.image: <repo>@sha256:<digest> in the lock")
    if base.image:
        try:
            client.images.get(base.image)
        except ImageNotFound:
            try:
                steps.begin(f"pull {base.image}")
                steps.wait(lambda: client.images.pull(base.image))
                steps.end()
            except docker.errors.APIError as e:
                steps.end("failed")
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
    steps.note(f"bootstrapping {base.bootstrap.distro} {base.bootstrap.release} from packages (no registry needed)")
    bootstrap(client, base.bootstrap, tag, apt_mirror or base.bootstrap.mirror, steps)
    return tag


def keyring(distro: str) -> Path:
    """The distribution's archive keyring on this machine; BaseError names the package when it is missing."""
    path, package = KEYRINGS[distro]
    if not path.is_file():
        raise BaseError(f"{path} is missing: debootstrap cannot verify {distro}'s release signature without it "
                        f"(install the {package} package, as scripts/start-docker.sh does)")
    return path


def without_credentials(url: str) -> str:
    """The URL with any user:password@ removed: what may be written into an image."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


def bootstrapper() -> str | None:
    """The first of BOOTSTRAPPERS installed here."""
    return next((tool for tool in BOOTSTRAPPERS if shutil.which(tool)), None)


def debootstrap_command(spec: Bootstrap, rootfs: Path, mirror: str, tool: str = "debootstrap") -> list[str]:
    """The bootstrap, refusing any release whose signature does not check against the distribution's keyring:
    debootstrap with --force-check-gpg; mmdebstrap through apt, which trusts only --keyring and refuses an unsigned
    release unless told to (it is not)."""
    if tool == "mmdebstrap":
        cmd = ["mmdebstrap", "--variant=minbase", f"--hook-dir={MERGED_USR_HOOK}", f"--keyring={keyring(spec.distro)}",
               f"--components={COMPONENTS[spec.distro]}"]
        if spec.packages:
            cmd.append("--include=" + ",".join(spec.packages))
        return cmd + [spec.release, str(rootfs), mirror]
    cmd = ["debootstrap", "--variant=minbase", "--force-check-gpg", f"--keyring={keyring(spec.distro)}",
           f"--components={COMPONENTS[spec.distro]}"]
    if spec.packages:
        cmd.append("--include=" + ",".join(spec.packages))
    cmd += [spec.release, str(rootfs), mirror]
    if spec.distro == "ubuntu" and not (DEBOOTSTRAP_SCRIPTS / spec.release).exists():
        cmd.append(str(DEBOOTSTRAP_SCRIPTS / UBUNTU_SCRIPT))
    return cmd


def sources_list(spec: Bootstrap) -> str:
    """The base's apt sources: the lock's canonical mirror, as debootstrap would have written it, for each pocket."""
    mirror, components = without_credentials(spec.mirror), COMPONENTS[spec.distro].replace(",", " ")
    return "".join(f"deb {mirror} {spec.release}{pocket} {components}\n" for pocket in POCKETS[spec.distro])


def bootstrap(client: docker.DockerClient, spec: Bootstrap, tag: str, mirror: str,
              steps: Steps | None = None) -> None:
    """Bootstrap the release, then import it as `tag`; each a step of `steps` when given."""
    tool = bootstrapper()
    if tool is None:
        raise BaseError("neither mmdebstrap nor debootstrap is installed (Debian/Ubuntu: apt-get install mmdebstrap, "
                        "as scripts/start-docker.sh does)")
    steps = steps or Steps(lambda text: None)
    with tempfile.TemporaryDirectory(prefix="goldenenv-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        command = debootstrap_command(spec, rootfs, mirror, tool)
        steps.begin(f"{tool} {spec.release} ({len(spec.packages)} packages beyond minbase)")
        done = steps.wait(lambda: subprocess.run(command, capture_output=True, text=True))
        steps.end("" if done.returncode == 0 else "failed")
        if done.returncode != 0:
            tail = " | ".join(done.stdout.strip().splitlines()[-3:] + done.stderr.strip().splitlines()[-2:])
            raise BaseError(f"{tool} {spec.release} from {without_credentials(mirror)} failed: "
                            f"{tail.replace(mirror, without_credentials(mirror))}")
        (rootfs / "etc/apt/sources.list").write_text(sources_list(spec))
        (rootfs / "var/log/bootstrap.log").unlink(missing_ok=True)  # every URL fetched, with the mirror's credentials
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists", "etc/apt/sources.list.d"):
            for entry in (rootfs / leftover).rglob("*"):  # partial/ too: file names carry the mirror URL
                if entry.is_file() or entry.is_symlink():
                    entry.unlink()
        steps.begin(f"docker import of the base as {tag}")
        steps.wait(lambda: _import(client, rootfs, Path(tmp) / "rootfs.tar", tag))
        steps.end()


def _import(client: docker.DockerClient, rootfs: Path, archive: Path, tag: str) -> None:
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    repository, _, version = tag.partition(":")
    client.api.import_image_from_file(
        str(archive), repository=repository, tag=version, changes=['CMD ["/bin/bash"]', "ENV LANG=C.UTF-8"],
    )

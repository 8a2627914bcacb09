"""The host layer: what a node's host runs beneath the golden container, pinned by a host lock.

A golden lock names its host lock (`host: ubuntu-gpu`), `images/hosts/<name>.yaml`, which pins per host OS family
the container engine, NVIDIA's container toolkit, the NVIDIA driver (for host images that carry none), the fabrics'
host packages (kernel modules) and the file-system clients: each component with the apt repository it comes from,
that repository's signing key by fingerprint, and every package at an exact version.

For one pool, `layer()` says what its host needs (NEEDS: the engine; what the accelerator family of its devices asks
of the host, goldenenv.accelerators' host_needs: NVIDIA's driver and container toolkit on a GPU node, Ascend's NPU
driver on an NPU node; the fabric's kernel modules, the stack's file-system client) and who provides each: the host
image (the catalog says it carries it, at the pinned version), or the install step (a component of the host lock
for the image's OS family), which runs at first boot or once in `goldenenv host-image build` to bake an image. A
need neither provides is `missing`: `up` refuses the pool before anything is rented.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from goldenenv.spec import ConfigError, LockError, Model, Problem
from goldenenv.userfile import read_yaml
from goldenenv.images.hostfiles import HOSTS, recorded


OsFamily = Annotated[str, Field(pattern=r"^(ubuntu|debian)-\d+(\.\d+)?$",
                                description="an OS family and release such as ubuntu-22.04 or debian-12")]
"""A host OS family as the catalog's host images name theirs: ubuntu-22.04, ubuntu-24.04, debian-12."""
PackageName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9+.-]+$", max_length=100)]
PackageVersion = Annotated[str, Field(pattern=r"^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$", max_length=100,
                                      description="a package version such as 27.5.1-1~ubuntu.22.04~jammy (an "
                                                  "epoch such as 5: may come first)")]
"""A Debian package version (policy 5.6.12): 5:28.0.4-1~ubuntu.22.04~jammy, 1.17.8-1."""
Fingerprint = Annotated[str, Field(pattern=r"^[0-9A-F]{40}$")]
"""An OpenPGP v4 key fingerprint, 40 upper-case hex digits without spaces (as `gpg --with-colons` prints fpr)."""
HttpsUrl = Annotated[str, Field(pattern=r"^https://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._~%+/-]*)?$", max_length=300,
                                description="an https:// address such as https://download.docker.com/linux/ubuntu")]
Need = Annotated[str, Field(pattern=r"^(engine|toolkit|driver(:[a-z0-9-]+)?|fs:[a-z0-9-]+|module:[a-z0-9_]+)$",
                            description="engine, toolkit, driver (NVIDIA's), driver:FAMILY (another accelerator "
                                        "family's: driver:ascend), fs:NAME or module:NAME (fs:lustre, module:efa)")]

ENGINE, TOOLKIT, DRIVER = "engine", "toolkit", "driver"


def fs_need(client: str) -> str:
    return f"fs:{client}"


def module_need(module: str) -> str:
    return f"module:{module}"


def is_driver(need: str) -> bool:
    """Whether a need is an accelerator family's driver: NVIDIA's `driver`, or `driver:<family>` (driver:ascend)."""
    return need == DRIVER or need.startswith(f"{DRIVER}:")


class AptSource(Model):
    """One apt source line: `deb [signed-by=<the repository's key>] <url> <suite> <components...>`."""

    url: HttpsUrl
    suite: str = Field(pattern=r"^(/|[a-z0-9][a-z0-9.-]*/?)$",
                       description="a suite such as jammy or stable/, or / for a flat repository")
    """The distribution (jammy) or `/` for a flat repository (NVIDIA's)."""
    components: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]] = []


class Repository(Model):
    """A vendor's apt repository: the key that signs it, by fingerprint, and its source per OS family."""

    key_url: HttpsUrl
    """Where the vendor publishes the signing key (ASCII-armoured or binary); the install step refuses a key whose
    fingerprint is not `fingerprint`."""
    fingerprint: Fingerprint
    sources: dict[OsFamily, AptSource] = Field(min_length=1)
    source: str = Field(default="", max_length=2000)
    """Where the fingerprint and the source lines were read (a page, its date)."""


class Component(Model):
    """Packages from one repository that provide host needs, at exact versions per OS family."""

    label: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._()+/-]*$", max_length=80)
    provides: list[Need] = Field(min_length=1)
    repository: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    packages: dict[OsFamily, dict[PackageName, PackageVersion]] = Field(min_length=1)
    """Per OS family, every package the component installs with its version (held at it after install)."""
    version: str = Field(pattern=r"^[0-9][A-Za-z0-9.+~-]*$", max_length=60)
    """The component's own release (28.0.4, 1.17.8, 570.172.08), which the catalog's host image columns and the
    compatibility rules compare."""
    kernel_packages: dict[OsFamily, dict[PackageName, PackageVersion]] = {}
    """Per OS family, packages built for one kernel, named `<name>-<running kernel>` on the host (uname -r, as
    lustre-client-modules-6.8.0-1024-aws): the install step adds the running kernel to each name."""
    modules: list[Annotated[str, Field(pattern=r"^[a-z0-9_]{1,64}$")]] = []
    """Kernel modules the component provides (as lsmod names them), loaded by the install step and checked."""
    source: str = Field(default="", max_length=2000)


class HostLock(Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = Field(default="", max_length=300)
    repositories: dict[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")], Repository] = Field(min_length=1)
    components: dict[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")], Component] = Field(min_length=1)

    @model_validator(mode="after")
    def _repositories_known(self) -> HostLock:
        problems = []
        for name, component in self.components.items():
            repository = self.repositories.get(component.repository)
            if repository is None:
                problems.append(f"components.{name}.repository: {component.repository!r} is not one of "
                                f"repositories ({', '.join(self.repositories)})")
                continue
            lacking = [family for family in component.packages if family not in repository.sources]
            if lacking:
                problems.append(f"components.{name}.packages: {', '.join(lacking)} has no source in repositories."
                                f"{component.repository}.sources ({', '.join(repository.sources)})")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def content_hash(self) -> str:
        canonical = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    def provider(self, need: str, family: str) -> tuple[str, Component] | None:
        """The component that provides `need` on `family`, with its name; None when none does."""
        for name, component in self.components.items():
            if need in component.provides and family in component.packages:
                return name, component
        return None


def host_lock_path(name: str, images_dir: Path | None = None) -> Path:
    from goldenenv.images.lock import folders

    searched = folders(images_dir)
    return next((f / HOSTS / f"{name}.yaml" for f in searched if (f / HOSTS / f"{name}.yaml").is_file()),
                searched[0] / HOSTS / f"{name}.yaml")


def host_lock_names(images_dir: Path | None = None) -> list[str]:
    from goldenenv.images.lock import folders

    return sorted({p.stem for f in folders(images_dir) for p in (f / HOSTS).glob("*.yaml")
                   if not p.name.endswith(".published.yaml")})


def load_host(name: str, images_dir: Path | None = None) -> HostLock:
    """Read and validate a host lock; LockError names the file and field and says what would be valid."""
    from pydantic import ValidationError

    from goldenenv.images.lock import _problem

    path = host_lock_path(name, images_dir)
    where = f"{HOSTS}/{name}.yaml"
    if not path.is_file():
        known = ", ".join(host_lock_names(images_dir)) or "none"
        raise LockError([Problem(f"host {name!r}", f"no {path}; host locks: {known}")], path)
    try:
        doc = read_yaml(path, where, "host lock")
        if isinstance(doc, dict) and doc.get("name") not in (None, name):
            raise ConfigError([Problem(f"{where}: name", f"must be the file's name, {name}")])
        try:
            return HostLock.model_validate(doc)
        except ValidationError as e:
            from goldenenv.stackconfig import user_errors

            raise ConfigError([_problem_at(where, p) for p in
                               (_problem(path, err, doc, HostLock) for err in user_errors(e.errors(), doc, HostLock))]) from None
    except LockError:
        raise
    except ConfigError as e:
        raise LockError(e.problems, path) from None


def _problem_at(where: str, problem: Problem) -> Problem:
    """images/lock.py's _problem names a field after the lock's folder; a host lock is a file of its own."""
    field_path = problem.key.split(": ", 1)[-1]
    return Problem(f"{where}: {field_path}", problem.message)


# ---- one pool's host layer ---------------------------------------------------------------------------------------

IMAGE, INSTALL, BAKED, MISSING = "image", "install", "baked", "missing"
"""Who provides a need: the host image as the catalog (or the stack) says it is, the install step (at first boot),
a baked host image (`goldenenv host-image build`), or no one (`up` refuses the pool)."""


@dataclass(frozen=True)
class Provided:
    need: str
    by: str
    """IMAGE | INSTALL | BAKED | MISSING"""
    component: str | None = None
    """The host lock's component that provides it (INSTALL, BAKED)."""
    version: str | None = None
    """The version the node will run: the component's, or the image's as the catalog records it."""
    why: str = ""
    """For the plan and for a refusal: what the image carries, in the catalog's words."""


@dataclass(frozen=True)
class HostLayer:
    """What one pool's hosts need beneath the golden container and who provides each."""

    host_lock: str | None
    """The host lock's name (None: the golden lock names none, so nothing can be installed)."""
    family: str | None
    """The host image's OS family (ubuntu-22.04); None when unknown (a stack's own image without `os`)."""
    provided: tuple[Provided, ...] = ()
    install: tuple[tuple[str, Component], ...] = ()
    """The host lock's components the install step runs, in the lock's order."""
    repositories: dict[str, Repository] = field(default_factory=dict)
    """The repositories those components come from."""
    base: str | None = None
    """The host image the layer goes on: the catalog's image name, or the stack's own hostImage id."""
    baked: str | None = None
    """The image `goldenenv host-image build` baked from `base` with this install (hostfiles.recorded): the nodes boot
    it and nothing is installed at first boot. None: not baked (or nothing to install)."""

    @property
    def missing(self) -> list[Provided]:
        return [p for p in self.provided if p.by == MISSING]

    @property
    def installs(self) -> bool:
        """Whether the node's first boot runs the install step (there is something to install and no baked image)."""
        return bool(self.install) and self.baked is None

    def packages(self) -> dict[str, str]:
        """Every package the install step installs, name -> version, for this layer's OS family."""
        return {name: version for _, component in self.install
                for name, version in component.packages[self.family].items()}

    def modules(self) -> list[str]:
        return [m for _, component in self.install for m in component.modules]

    @property
    def digest(self) -> str:
        """Identity of what the install step does: the baked image recorded for it is found by this."""
        body = {"family": self.family, "repositories": {n: r.model_dump(mode="json") for n, r in
                                                          sorted(self.repositories.items())},
                "install": [[n, c.model_dump(mode="json")] for n, c in self.install]}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]


def family_of(os_text: str) -> str | None:
    """The catalog's `os` cell as an OS family: 'Ubuntu 22.04' -> ubuntu-22.04; None when it names none."""
    words = os_text.lower().split()
    return f"{words[0]}-{words[1]}" if len(words) == 2 and words[0] in ("ubuntu", "debian") else None


def pool_needs(spec, pool, *, family=None, fabric=None) -> list[str]:
    """What the pool's hosts need beneath the golden container: the engine; what the accelerator family of its
    devices asks of the host (its host_needs: NVIDIA's driver and toolkit, Ascend's NPU driver); the fabric's kernel
    modules; the stack's file-system client (the cloud's file_system_client)."""
    from goldenenv import clouds

    needs = [ENGINE]
    if family is not None:
        needs += list(family.host_needs)
    if fabric is not None:
        needs += [module_need(m) for m in fabric.kernel_modules]
    client = clouds.get(spec.cloud).file_system_client(spec)
    if client:
        needs.append(fs_need(client))
    return needs


def _carried(image, need: str, family=None) -> str:
    """What the catalog's host image row says of a need: a version, `installed` (present, version not stated),
    `none` (absent) or '' (the catalog does not know). A driver is read from the family's column (nvidia_driver,
    npu_driver)."""
    if need == ENGINE:
        return image.docker
    if need == TOOLKIT:
        return image.container_toolkit
    if is_driver(need):
        return getattr(image, family.host_driver if family else "nvidia_driver") or "none"
    if need.startswith("module:"):
        return "installed" if need.split(":", 1)[1] in image.modules else "none"
    if need.startswith("fs:"):
        return image.lustre_client if "lustre" in need else ""
    return ""


def resolve(needs: list[str], host_lock: HostLock | None, family: str | None, carried) -> HostLayer:
    """Who provides each need. `carried(need)` is what the host image holds (a version, installed, none, or '').

    The driver the image carries is the image's (compat checks the lock's CUDA against it); any other need the
    image carries at exactly the host lock's version is the image's; everything else the install step provides
    when the host lock has a component for it on this OS family. What neither provides is missing."""
    provided, install = [], {}
    for need in needs:
        have = carried(need)
        offer = host_lock.provider(need, family) if host_lock and family else None
        if is_driver(need) and have not in ("", "none"):
            provided.append(Provided(need, IMAGE, version=have, why=f"the host image's driver {have}"))
        elif offer and have == offer[1].version:
            provided.append(Provided(need, IMAGE, offer[0], have, f"the host image carries {have}, the pinned one"))
        elif offer:
            install[offer[0]] = offer[1]
            said = {"": "the catalog does not say whether the host image has it", "none": "the host image lacks it",
                    "installed": "the host image's version is not stated"}.get(have, f"the host image has {have}")
            provided.append(Provided(need, INSTALL, offer[0], offer[1].version, said))
        else:
            said = {"": "the catalog does not say whether the host image has it",
                    "none": "the host image lacks it"}.get(have)
            if said is None:
                provided.append(Provided(need, IMAGE, version=None if have == "installed" else have,
                                         why=f"the host image's ({have}; the host lock pins none for {family})"))
            else:
                provided.append(Provided(need, MISSING, why=said))
    order = list(host_lock.components) if host_lock else []
    chosen = tuple(sorted(install.items(), key=lambda item: order.index(item[0])))
    repositories = {c.repository: host_lock.repositories[c.repository] for _, c in chosen} if host_lock else {}
    return HostLayer(host_lock.name if host_lock else None, family, tuple(provided), chosen, repositories)


def baked_image(found: HostLayer, cloud: str, region: str) -> str | None:
    """The image id `goldenenv host-image build` recorded for this layer's base image and install in the region."""
    return recorded(found.host_lock, cloud, region, found.base, found.digest)


def with_baked(found: HostLayer, image_id: str | None) -> HostLayer:
    """The layer as a baked image gives it: what the install step would provide is the baked image's."""
    if image_id is None or not found.install:
        return found
    provided = tuple(replace(p, by=BAKED, why=f"baked into {image_id}") if p.by == INSTALL else p
                     for p in found.provided)
    return replace(found, provided=provided, baked=image_id)


def layer(spec, pool, lock=None, *, baked: bool = True, head: bool = False) -> HostLayer:
    """The host layer of one pool of a stack (GPU or not, its fabric, its host image, the golden lock's host lock),
    baked when `goldenenv host-image build` recorded an image for its base image and install in the stack's region.
    baked=False: the layer as the install step sees it (what a bake installs), recorded image or not.
    head: the Slurm head's, on this pool's host image (head_layer)."""
    found = _layer(spec, pool, lock, head)
    if not baked or found.base is None or found.host_lock is None or not found.install:
        return found
    return with_baked(found, baked_image(found, spec.cloud, spec.region))


def head_layer(spec, lock=None) -> HostLayer:
    """The Slurm head's host layer: the head boots the first pool's host image (as every cloud's program gives it)
    and needs only the engine and the stack's file-system client: no GPU, so no driver or toolkit, no fabric."""
    return layer(spec, spec.nodes[0], lock, head=True)


def _layer(spec, pool, lock=None, head: bool = False) -> HostLayer:
    from goldenenv import accelerators, catalog, fabrics
    from goldenenv.images.lock import load
    from goldenenv.nodehost import node_host

    lock = lock or load(spec.image.lock)
    node = catalog.instance_types(spec.cloud).get(pool.instance_type)
    fabric = fabrics.get(node.rdma) if node and node.has_rdma and pool.rdma is not False else None
    host_lock = load_host(lock.host) if getattr(lock, "host", None) else None
    devices = None if head else accelerators.of_instance(spec.cloud, pool.instance_type)
    host = node_host(spec.cloud, spec.region, pool.host_image, devices)
    needs = pool_needs(spec, pool) if head else pool_needs(spec, pool, family=devices, fabric=fabric)
    if host.override_id:
        declared = set(pool.host_image.kernel_modules)
        family = getattr(pool.host_image, "os", None)

        def carried(need: str) -> str:
            if is_driver(need):
                return pool.host_image.driver
            if need.startswith("module:"):
                return "installed" if need.split(":", 1)[1] in declared else "none"
            return "installed"  # the stack's own image is its statement that it has the engine, toolkit, client
        return replace(resolve(needs, host_lock, family, carried), base=host.override_id)
    if host.image is None:
        return resolve(needs, host_lock, None, lambda need: "")
    return replace(resolve(needs, host_lock, family_of(host.image.os),
                           lambda need: _carried(host.image, need, devices)), base=host.image.name)

"""The lock of a golden image: the only place its versions are written.

`images/<name>/lock.yaml` pins the base, the OS packages, Python, CUDA/cuDNN/NCCL, torch, the
fabric (a fabric of goldenenv/fabrics/ with its section: EFA + aws-ofi-nccl, eRDMA, GPUDirect-TCPX(O), gIB)
and every Python distribution with its hashes. Mirrors,
extra CAs and wheelhouses are build options and stay out of it; the lock's content hash tags
and labels the image. The minimum driver is derived from the catalog, never written here.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.utils import canonicalize_name
from pydantic import Field, ValidationError, create_model, model_validator

from goldenenv import accelerators, fabrics, project
from goldenenv.accelerators.cuda.driver import release_of  # noqa: F401  (callers read it here)
from goldenenv.fabrics import DebianPackage, Efa, Erdma, GpuDirectTcp, Gib, Sha256, Version  # noqa: F401
from goldenenv.modelwords import error_message, user_errors, user_path
from goldenenv.spec import ConfigError, LockError, Model, Problem
from goldenenv.userfile import clip, read_yaml

IMAGES = project.packaged("images")
"""The packaged locks, looked up after the project's images/. Set to another folder (tests, tools), that folder is
looked up first and is where published.yaml is written."""
MirrorUrl = Annotated[str, Field(
    pattern=r"^https?://[A-Za-z0-9._~%+-]+(:[A-Za-z0-9._~%+-]*)?(@[A-Za-z0-9._-]+(:\d+)?)?(/[A-Za-z0-9._~%+/-]*)?$",
    max_length=300, description="an http:// or https:// address such as http://deb.debian.org/debian (a "
                                "user:password@ may come before the host, other characters of a password %-encoded)")]
"""http(s)://[user:password@]host[:port][/path]; other characters of a password are %-encoded."""
Requirement = Annotated[str, Field(
    pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._,-]+\])?"
            r"((===?|~=|!=|<=?|>=?)[A-Za-z0-9.*+!_-]+(,(===?|~=|!=|<=?|>=?)[A-Za-z0-9.*+!_-]+)*)?$",
    max_length=200, description="a pip requirement without spaces, markers or URLs: a name, optional [extras] and "
                                "version specifiers, such as torch==2.5.1 or numpy>=1.26,<2")]
"""A pip requirement without markers, URLs or options: name[extras] and version specifiers, no spaces."""
DistName = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$", max_length=100)]
"""A distribution name as `pin` writes it (canonical, lower case): the first word of a requirements line."""
OneLine = Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$", max_length=200)]
"""Printable text on one line: no control characters, no line or paragraph separators."""


class Bootstrap(Model):
    """A base built from distribution packages (debootstrap), for sites that cannot pull images."""

    distro: Literal["debian", "ubuntu"]
    release: str = Field(pattern=r"^[a-z]+$")
    mirror: MirrorUrl
    """The distribution's canonical mirror: debootstrap's default and the base's apt source."""
    packages: list[DebianPackage] = []
    """OS packages baked into the base (python3, python3-venv, ca-certificates ...)."""


class Base(Model):
    image: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]*@sha256:[0-9a-f]{64}$",
                              description="an image by digest: its repository, @sha256: and 64 characters 0-9 a-f "
                                          "(debian@sha256:...)")
    """A registry image pinned by digest."""
    bootstrap: Bootstrap | None = None
    unverified_image: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*:[A-Za-z0-9._-]+$",
                                         description="an image by tag (repository:tag) whose digest no public "
                                                     "source gives")
    """A vendor's base image by tag, for a lock whose base no public source pins by digest (Huawei's CANN images:
    their registries are not reachable from where the lock was written). The lock renders, saying so at the top of
    its Dockerfile; `image build` refuses it until `image` pins the digest read from the registry."""
    os_packages: list[DebianPackage] = []
    """Installed with the distribution's package manager on top of an image base."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Base:
        if sum(x is not None for x in (self.image, self.bootstrap, self.unverified_image)) != 1:
            raise ValueError("set exactly one of image (repo@sha256:...) or bootstrap (distro, release, mirror), or "
                             "unverifiedImage (repo:tag) where no public source gives the image's digest")
        return self

    @property
    def ref(self) -> str | None:
        """The base as a Dockerfile's FROM names it, for an image base (by digest, or by tag when unverified)."""
        return self.image or self.unverified_image


DebianVersion = Annotated[str, Field(pattern=r"^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$", max_length=100,
                                     description="a Debian package version such as 22.05.8-4+deb12u3 (an epoch "
                                                 "such as 1: may come first)")]
"""A package version in Debian's version alphabet (policy 5.6.12): 22.05.8-4+deb12u3."""


class Slurm(Model):
    """Slurm and munge from the base's own distribution, at its package versions: the nodes' slurmd, the head's
    slurmctld and the client commands are this image, so every part of the cluster runs one version."""

    version: DebianVersion
    """slurmd, slurmctld, slurmdbd and slurm-client (one source package, one version), e.g. 22.05.8-4+deb12u3."""
    munge: DebianVersion
    """munge and libmunge2, e.g. 0.5.15-2+deb12u1."""
    mariadb: DebianVersion
    """mariadb-server from the same distribution, e.g. 1:10.11.18-0+deb12u1: the accounting database slurmdbd keeps
    on the head (every job, user, GPU-minute and limit). The image carries it so the head needs nothing else: the
    local stack runs it in a container of its own, a cloud head inside its golden container."""

    @property
    def upstream(self) -> str:
        """Slurm's own release without the distribution's revision: 22.05.8-4+deb12u3 → 22.05.8."""
        return self.version.split(":")[-1].split("-")[0]

    def packages(self) -> list[str]:
        return ([f"{name}={self.version}" for name in SLURM_PACKAGES]
                + [f"{name}={self.munge}" for name in MUNGE_PACKAGES]
                + [f"{name}={self.mariadb}" for name in MARIADB_PACKAGES])


SLURM_PACKAGES = ("slurmd", "slurmctld", "slurmdbd", "slurm-client")
MUNGE_PACKAGES = ("munge", "libmunge2")
MARIADB_PACKAGES = ("mariadb-server",)
PACKAGE_SECRETS = ("/etc/munge/munge.key",)
"""Keys a package's install script makes (munge's postinst): removed in the same layer, never in the image; each
cluster gets its own key from the cloud's secret store."""


Group = Literal["cuda", "torch", "project"]
GROUPS: tuple[str, ...] = ("cuda", "torch", "project")
"""Python layers, rarely changing first: bumping a project pin reuses the CUDA and torch layers."""


class DeepspeedOps(Model):
    """DeepSpeed ops compiled at image build time, so no node compiles them just in time (which needs nvcc)."""

    prebuilt: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]] = Field(min_length=1)
    """Op names as DeepSpeed's `ds_report` lists them (catalog deepspeed_ops.csv): fused_adam, cpu_adam, ..."""
    cpu_arch: Literal["x86-64-v2", "x86-64-v3", "x86-64-v4"] = "x86-64-v3"
    """What the CPU ops are compiled for, in place of DeepSpeed's -march=native (the build machine's CPU)."""
    compiler_packages: list[DebianPackage] = Field(min_length=1)
    """The CUDA toolkit (nvcc) and host C++ compiler, installed in the builder stage only, from the base's release."""
    compiler_components: list[Annotated[str, Field(pattern=r"^[a-z][a-z-]*$")]] = []
    """Archive components the builder stage adds to the base's apt source for them (Debian's CUDA is in non-free)."""
    compiler: str = Field(default="g++", pattern=r"^[a-z0-9][a-z0-9+.-]*$")
    """The host C++ compiler (one the CUDA toolkit supports): for the C++ sources and as nvcc's -ccbin."""


class Pin(Model):
    version: str = Field(pattern=r"^[0-9][0-9A-Za-z.+!-]*$")
    sha256: list[Sha256] = Field(min_length=1)
    group: Group = "project"


FABRIC_NAMES: tuple[str, ...] = ("none", *fabrics.FABRICS)
"""What `fabric` may say: none, or a fabric of the registry (goldenenv/fabrics/, one folder each)."""
FABRIC_SECTIONS: tuple[str, ...] = fabrics.sections()
"""The fabrics' lock sections, each with the model its fabric names: a lock sets its own fabric's, no other."""
SECTIONS_IN_EVERY_IDENTITY = ("efa", "erdma")
"""The fabric sections every lock's identity has held since before the registry (null when unset): kept there so
no lock's tag moves. Every later fabric's section is part of the identity only when set."""
ACCELERATOR_SECTIONS: tuple[str, ...] = accelerators.sections()
"""The accelerator families' lock sections (ascend: {...}); CUDA's pins are top-level fields, from before them."""
IDENTITY_IF_SET = ("deepspeed_ops", "extends", "max_compressed_gb", "slurm",
                   *(s for s in FABRIC_SECTIONS if s not in SECTIONS_IN_EVERY_IDENTITY), *ACCELERATOR_SECTIONS)
"""Fields that are part of a lock's identity only when set: a lock that does not use them keeps its tag."""


NOT_IDENTITY = ("host",)
"""Fields that never change the image: what its nodes' hosts run."""


NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
"""A lock's name, which is its folder's (images/<name>/lock.yaml) and the image's (goldenenv/<name>)."""


class Lock(Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: OneLine = ""
    base: Base
    python: str = Field(pattern=r"^3\.\d+$", description="a Python 3 version such as 3.11")
    cuda: Version | None = None
    """CUDA toolkit version, e.g. 12.6.3 (12.6 Update 3)."""
    cudnn: Version | None = None
    nccl: Version | None = None
    torch: str | None = Field(default=None, pattern=r"^\d+\.\d+\.\d+(\+(cpu|cu\d+))?$",
                              description="a torch version such as 2.5.1, 2.5.1+cu124 or 2.5.1+cpu")
    torch_cuda: str | None = Field(default=None, pattern=r"^(cpu|cu\d{3})$",
                                   description="cpu, or cu and three digits such as cu124")
    """The CUDA variant of the torch wheel: cpu, cu126 ..."""
    deepspeed: Version | None = None
    fabric: Literal[FABRIC_NAMES] = "none"  # type: ignore[valid-type]
    """none, or a fabric of the registry, with its section (efa: {...}, tcpxo: {...})."""
    gpu_archs: list[Annotated[str, Field(pattern=r"^sm_\d+$", description="a GPU architecture such as sm_90")]] = []
    deepspeed_ops: DeepspeedOps | None = None
    extends: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Another lock whose pins and layers this one takes whole, adding only its fabric layer on top."""
    max_compressed_gb: float | None = Field(default=None, gt=0)
    """The image's size limit as nodes pull it (`docker save | gzip -1`, GB = 10^9 bytes); the build test holds it."""
    requirements: dict[Group, list[Requirement]] = {}
    """Extra top-level requirements per layer, beyond the pins above (e.g. project: [numpy==2.2.6])."""
    packages: dict[DistName, Pin] = {}
    """Generated by `goldenenv image pin`: every distribution in the image, with its hashes."""
    user: str = Field(default="trainer", pattern=r"^[a-z_][a-z0-9_-]*$")
    slurm: Slurm | None = None
    """The scheduler's pins; a stack with `scheduler: slurm` needs an image that has them."""
    host: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]*$")
    """The host lock (images/hosts/<name>.yaml) of the nodes that run this image: engine, container toolkit, driver,
    fabric modules and file-system clients, per host OS family (goldenenv.images.host). Not part of the image's
    identity: the host layer is not in the image."""

    @model_validator(mode="after")
    def _one_fact_one_place(self) -> Lock:
        """Pins named twice (as a component and as a package) must agree."""
        problems = []
        for field, dist in (("torch", "torch"), ("nccl", "nvidia-nccl-cu12"), ("cudnn", "nvidia-cudnn-cu12"),
                            ("deepspeed", "deepspeed")):
            want = getattr(self, field)
            pin = self.packages.get(dist)
            if want and pin and pin.version != want:
                problems.append(f"{field} is {want} but packages.{dist} is {pin.version}: run goldenenv image pin")
        if (self.torch is None) != (self.torch_cuda is None):
            problems.append("torch and torchCuda go together (torchCuda: cpu, cu126, ...)")
        if self.torch_cuda == "cpu" and (self.cuda or self.gpu_archs):
            problems.append("torchCuda cpu goes with no cuda and no gpuArchs")
        if self.torch_cuda not in (None, "cpu") and not (self.cuda and self.gpu_archs):
            problems.append(f"torchCuda {self.torch_cuda} needs cuda and gpuArchs")
        fabric = fabrics.get(self.fabric)
        own = fabric.lock_section if fabric else None
        written = [section for section in FABRIC_SECTIONS if getattr(self, section) is not None]
        if written != ([own] if own else []):
            problems.append(f"fabric {self.fabric} needs exactly its own section ({own or 'none'}) but the lock "
                            f"writes {', '.join(written) or 'none'}; sections: {', '.join(FABRIC_SECTIONS)}")
        families = accelerators.used_by(self)
        if len(families) > 1:
            problems.append(f"one accelerator family per image, but the lock sets pins of {families[0].label} and "
                            f"{families[1].label}: an image built for both runs on neither's nodes as locked")
        if self.deepspeed_ops and not (self.deepspeed and self.torch_cuda not in (None, "cpu")):
            problems.append("deepspeedOps needs deepspeed and a CUDA torch (torchCuda cu126, ...)")
        if self.deepspeed_ops:
            from goldenenv import catalog

            known = catalog.deepspeed_ops()
            unknown = [op for op in self.deepspeed_ops.prebuilt if op not in known]
            if unknown:
                problems.append(f"deepspeedOps.prebuilt: {', '.join(unknown)} not DeepSpeed ops; valid: "
                                + ", ".join(sorted(known)))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def content_hash(self) -> str:
        """Identity of the image: changes with any pin, not with build options."""
        unset: dict[str, Any] = {name: True for name in IDENTITY_IF_SET if getattr(self, name) is None}
        unset.update({name: True for name in NOT_IDENTITY})
        if self.base.unverified_image is None:  # a base field added later: no lock without it changes its tag
            unset["base"] = {"unverified_image": True}
        canonical = json.dumps(self.model_dump(mode="json", by_alias=True, exclude=unset), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"goldenenv/{self.name}:{self.content_hash}"

    @property
    def torch_version(self) -> str | None:
        """torch without its local variant: 2.6.0+cu126 → 2.6.0."""
        return self.torch.split("+", 1)[0] if self.torch else None

    def group(self, group: str) -> dict[str, Pin]:
        return {name: pin for name, pin in sorted(self.packages.items()) if pin.group == group}

    def unpinned(self) -> list[str]:
        """Top-level requirements with no entry in packages: the lock needs `goldenenv image pin`."""
        names = [re.split(r"[=<>!~ ;\[]", req, maxsplit=1)[0] for reqs in self.top_level().values() for req in reqs]
        return [n for n in names if canonicalize_name(n) not in self.packages]

    def top_level(self) -> dict[str, list[str]]:
        """What each layer asks for, from the pins above and `requirements`; `pin` resolves these."""
        asked: dict[str, list[str]] = {"cuda": [], "torch": [f"torch=={self.torch}"] * bool(self.torch),
                                       "project": [f"deepspeed=={self.deepspeed}"] * bool(self.deepspeed)}
        for family in accelerators.used_by(self):  # NCCL and cuDNN (CUDA), torch_npu (Ascend)
            for group, wanted in family.requirements(self).items():
                asked[group] += wanted
        return {g: asked[g] + list(self.requirements.get(g, [])) for g in GROUPS}

    @property
    def cuda_arch_list(self) -> str:
        """gpuArchs as TORCH_CUDA_ARCH_LIST writes them: [sm_80, sm_90] → '8.0;9.0'."""
        return ";".join(f"{a[3:-1]}.{a[-1]}" for a in self.gpu_archs)


Lock = create_model(  # type: ignore[misc]  # the fields above, plus one optional section per fabric and accelerator
    "Lock", __base__=Lock, __module__=__name__,
    **{fabric.lock_section: (fabric.section | None, None) for fabric in fabrics.FABRICS.values()},
    **{family.lock_section: (family.section | None, None) for family in accelerators.ACCELERATORS.values()
       if family.lock_section})


def folders(images_dir: Path | None = None) -> list[Path]:
    """Where locks are read, first match wins: `images_dir` alone when given; else IMAGES when set to another
    folder, the current project's images/, then the packaged ones. The first is where published.yaml is written."""
    if images_dir is not None:
        return [images_dir]
    found = project.current().image_folders()
    return found if IMAGES == project.packaged("images") else [IMAGES, *found]


def lock_path(name: str, images_dir: Path | None = None) -> Path:
    """The lock's file in the first folder that has it (the project's path when none has it)."""
    searched = folders(images_dir)
    return next((f / name / "lock.yaml" for f in searched if (f / name / "lock.yaml").is_file()),
                searched[0] / name / "lock.yaml")


def names(images_dir: Path | None = None) -> list[str]:
    return sorted({p.parent.name for f in folders(images_dir) for p in f.glob("*/lock.yaml")})


def load(name: str, images_dir: Path | None = None) -> Lock:
    """Read and validate a lock; LockError (a ConfigError headed `invalid lock`) names the lock field and what would
    be valid.

    Locks are YAML written by people too: read with the stack files' reader (no aliases, text
    keys, bounded size and depth), so a broken lock is one line, never a traceback. A lock's name is its folder's:
    the image it builds is goldenenv/<name>, so a copied lock that kept another's name would build that one's image.
    """
    path = lock_path(name, images_dir)
    try:
        return _load(name, path, images_dir)
    except LockError:
        raise
    except ConfigError as e:
        raise LockError(e.problems, path) from None


def _load(name: str, path: Path, images_dir: Path | None) -> Lock:
    if not path.exists():
        known = ", ".join(names(images_dir)) or "none"
        raise ConfigError([Problem(f"image {name!r}", f"no {path}; images with a lock: {known}")])
    doc = read_yaml(path, f"{path.parent.name}/lock.yaml", "lock file")
    if isinstance(doc, dict) and doc.get("extends") is not None:
        doc = _extended(path, doc, images_dir)
    folder = path.parent.name
    named = doc.get("name") if isinstance(doc, dict) else None
    misnamed = ([Problem(f"{folder}/lock.yaml: name", f"{clip(named)!r} is not the lock's folder; write name: {folder} "
                                                      f"(the image it builds is goldenenv/<name>)")]
                if isinstance(named, str) and named != folder and NAME.fullmatch(named) else [])
    try:
        lock = Lock.model_validate(doc)
    except ValidationError as e:
        raise ConfigError(misnamed + [_problem(path, err, doc) for err in user_errors(e.errors(), doc, Lock)]) \
            from None
    except (ValueError, TypeError, RecursionError, OverflowError) as e:
        raise ConfigError([Problem(f"{path.parent.name}/lock.yaml", f"cannot be read: {clip(e)}")]) from None
    if misnamed:
        raise ConfigError(misnamed)
    return lock


EXTENDING_KEYS = ("name", "description", "extends", "fabric", *FABRIC_SECTIONS)
"""What a lock that extends another may say: everything else (base, versions, archs, ops, packages) is the other's."""


def _extended(path: Path, doc: dict, images_dir: Path | None) -> dict:
    """The stem lock's fields with this lock's name, description and fabric on top: the stem's layers, plus one."""
    where = f"{path.parent.name}/lock.yaml"
    stem_name = doc["extends"]
    problems = [Problem(f"{where}: {key}", f"set in {stem_name} (extends): a lock that extends another adds only "
                                           f"its fabric; it may set {', '.join(EXTENDING_KEYS)}")
                for key in doc if key not in EXTENDING_KEYS]
    named = isinstance(stem_name, str) and re.fullmatch(r"[a-z0-9][a-z0-9-]*", stem_name) is not None
    stem_path = lock_path(stem_name, images_dir) if named else None
    if stem_path is None or not stem_path.is_file() or stem_name == path.parent.name:
        known = ", ".join(n for n in names(images_dir) if n != path.parent.name) or "none"
        raise ConfigError([Problem(f"{where}: extends", f"{clip(stem_name)!r} is not another image's lock; images: "
                                                       f"{known}")])
    stem = read_yaml(stem_path, f"{stem_name}/lock.yaml", "lock file")
    if not isinstance(stem, dict):
        raise ConfigError([Problem(f"{stem_name}/lock.yaml", "must be a mapping of lock fields")])
    if stem.get("extends") is not None or stem.get("fabric", "none") != "none":
        problems.append(Problem(f"{where}: extends", f"{stem_name} must be a stem: no fabric and no extends of its own"))
    if problems:
        raise ConfigError(problems)
    return {**{k: v for k, v in stem.items() if k not in EXTENDING_KEYS}, **doc}


def _problem(path: Path, err: dict, doc: object = None, model: type[Model] | None = None) -> Problem:
    """One lock error at the field as written in lock.yaml, without pydantic's internal location parts; `model`: the
    lock's model when it is not a golden image's Lock (a host lock)."""
    model = model or Lock
    field = ".".join(clip(part) for part in user_path(err["loc"], doc, model)[0]) or "(top level)"
    if err["type"] == "extra_forbidden":
        message = "unknown field"
    elif err["type"] == "missing":
        message = "required, but not set"
    else:
        message = error_message(err, model)
    return Problem(f"{path.parent.name}/lock.yaml: {field}", message)


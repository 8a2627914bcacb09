"""Lock → Dockerfile and build context. Python decides the layers; the templates only place them."""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from goldenenv import accelerators, catalog, fabrics, slurm
from goldenenv.images import bundle
from goldenenv.images.lock import GROUPS, PACKAGE_SECRETS, Lock, MirrorUrl
from goldenenv.render import render
from goldenenv.spec import ConfigError, Problem

UID = 1000
TOOL = "pip"
"""The builder stages install with the lock's own pip, so every lock pins it."""
LABEL_PREFIX = "dev.goldenenv"
SPOTWATCH = "/usr/local/bin/goldenenv-spotwatch"
"""The node-side spot-notice watcher (goldenenv/spotwatch.py), installed in every golden image."""
HEALTH = "/usr/local/bin/goldenenv-health"
"""The node health judge and collector (goldenenv/health/judge.py, standard library only), in every golden image."""
HEALTH_RULES = "/usr/local/share/goldenenv/health-rules.json"
"""The catalog's health rules (XID actions, thresholds) as the image's judge reads them (catalog.health)."""
PACKAGE = Path(__file__).resolve().parents[1]
NODE_TOOLS = {"spotwatch.py": (bundle.spot_watcher, SPOTWATCH), "health-judge.py": (bundle.health_judge, HEALTH)}
"""Build-context name → (its content, path in the image): stdlib-only scripts the nodes run, each one file with the
cloud or fabric modules it finds by discovery bundled in (goldenenv.images.bundle)."""
SLURM_TOOLS = {"goldenenv-slurm": (PACKAGE / "slurm" / "entry.sh", slurm.ENTRY),
               "goldenenv-healthcheck": (PACKAGE / "slurm" / "healthcheck.sh", slurm.HEALTH_CHECK),
               "goldenenv-team": (PACKAGE / "slurm" / "team.py", slurm.TEAM_TOOL)}
"""The scheduler daemons' entry point, Slurm's node health check and the team's users and associations, in images
whose lock pins Slurm."""


@dataclass(frozen=True)
class NodeTool:
    content: bytes
    target: str
    """Where the image has it."""
    mode: int = 0o755


def node_tools(lock: Lock) -> dict[str, NodeTool]:
    """Build-context name → what goldenenv puts in the image for the nodes: its scripts, and the health rules."""
    from goldenenv.catalog import health

    tools = {name: NodeTool(content(), target) for name, (content, target) in NODE_TOOLS.items()}
    tools.update({name: NodeTool(source.read_bytes(), target)
                  for name, (source, target) in (SLURM_TOOLS if lock.slurm else {}).items()})
    rules = json.dumps(health.rules_document(), sort_keys=True, indent=1).encode()
    tools["health-rules.json"] = NodeTool(rules, HEALTH_RULES, 0o644)
    return tools


def tools_hash(lock: Lock) -> str:
    """The node tools' content (spot watcher, health judge and rules, scheduler entry): an image built with older
    ones is rebuilt, though its lock, and so its tag, is the same."""
    import hashlib

    digest = hashlib.sha256()
    for name, tool in sorted(node_tools(lock).items()):
        digest.update(f"{name}\0{tool.target}\0".encode() + tool.content)
    return digest.hexdigest()[:12]


def os_packages(lock: Lock) -> list[str]:
    """What the distribution's package manager installs: the base's extra packages, then Slurm and munge pinned."""
    return [*lock.base.os_packages, *(lock.slurm.packages() if lock.slurm else [])]
TOOLCHAIN = "toolchain"
"""The builder stage with the CUDA toolkit and host compiler that compile DeepSpeed's ops: never part of the image."""
CXX_WRAPPER = "/usr/local/bin/goldenenv-cxx"
SIMD = {"x86-64-v4": "__AVX512__", "x86-64-v3": "__AVX256__", "x86-64-v2": "__SCALAR__"}
"""The SIMD switch of DeepSpeed's CPU ops (csrc/includes/simd.h) that each x86-64 level can run: v4 has AVX-512F,
v3 has AVX2 and FMA, v2 neither."""


@dataclass(frozen=True)
class BuildOptions:
    """How to reach packages at this site: not part of the image's identity."""

    ca_cert: Path | None = None
    """Extra CA certificate(s) for a TLS-inspecting proxy; used by pip in builder stages only."""
    pip_index_url: str | None = None
    apt_mirror: str | None = None
    """A site mirror (may hold credentials): used by debootstrap and the `apt` builder stage, never in the image."""
    wheelhouse: Path | None = None
    """Local wheels (e.g. a CPU torch build); only the files the lock pins are copied."""

    def __post_init__(self) -> None:
        if self.apt_mirror is not None:
            try:
                TypeAdapter(MirrorUrl).validate_python(self.apt_mirror)
            except ValidationError:
                raise ConfigError([Problem("--apt-mirror", "not a mirror URL: write http(s)://[user:password@]host"
                                                           "[:port]/path, other characters %-encoded")]) from None

    @classmethod
    def from_environment(cls) -> BuildOptions:
        """What pip on this machine uses: PIP_CERT as the extra CA, PIP_FIND_LINKS as the wheelhouse."""
        ca, house = os.environ.get("PIP_CERT"), os.environ.get("PIP_FIND_LINKS")
        return cls(ca_cert=Path(ca) if ca and Path(ca).is_file() else None,
                   wheelhouse=Path(house) if house and Path(house).is_dir() else None,
                   pip_index_url=os.environ.get("PIP_INDEX_URL") or None)


def requirements(lock: Lock, group: str) -> str:
    """The layer's requirements file: every distribution pinned to one version and its hashes."""
    # neither the lock's name nor its hash here: the locks that extend it share this layer, and another layer's
    # pin must not bust this cache
    lines = [f"# {group} layer"]
    lines += [_requirement_line(lock, name) for name in lock.group(group)]
    return "\n".join(lines) + "\n"


def _requirement_line(lock: Lock, name: str) -> str:
    pin = lock.packages[name]
    return f"{name}=={pin.version} " + " ".join(f"--hash=sha256:{h}" for h in pin.sha256)


def env(lock: Lock) -> dict[str, str]:
    """Runtime environment: the accelerator family's (CUDA: the driver floor for the container runtime), fabric
    settings from the catalog."""
    values = {"GOLDENENV_IMAGE": lock.name, "GOLDENENV_LOCK": lock.content_hash}
    family = accelerators.of_lock(lock)
    if family:
        values.update(family.env(lock))
    fabric = fabrics.get(lock.fabric)
    if fabric:
        section = getattr(lock, fabric.lock_section)
        versions = {"nccl": lock.nccl, **fabric.versions(section)} if lock.nccl else fabric.versions(section)
        values.update(catalog.fabric_env(fabric.name, versions))
        if fabric.libraries:  # where the fabric's layer put its NCCL plugin
            values["LD_LIBRARY_PATH"] = fabric.libraries
    if lock.deepspeed and family and family.deepspeed_accelerator:
        values["DS_ACCELERATOR"] = family.deepspeed_accelerator  # never DeepSpeed's CPU accelerator unnoticed
    return values


def ops_build_env(lock: Lock) -> dict[str, str]:
    """The project layer's build environment when DeepSpeed's ops are compiled at build time: the host compiler
    (through the wrapper that applies the lock's cpuArch, and as nvcc's), one DS_BUILD_<OP> per prebuilt op
    (catalog), the CUDA accelerator (no GPU is visible to a build) and the lock's archs."""
    if not lock.deepspeed_ops:
        return {}
    ops = catalog.deepspeed_ops()
    values = {"CXX": CXX_WRAPPER, "NVCC_PREPEND_FLAGS": f"-ccbin /usr/bin/{lock.deepspeed_ops.compiler}",
              "DS_ACCELERATOR": "cuda", "DS_BUILD_OPS": "0"}
    values.update({ops[op].build_var: "1" for op in lock.deepspeed_ops.prebuilt})
    values["TORCH_CUDA_ARCH_LIST"] = lock.cuda_arch_list
    return values


def labels(lock: Lock) -> dict[str, str]:
    family = accelerators.of_lock(lock)
    family_pins, family_targets = family.labels_of(lock) if family else ({}, {})
    pins = {
        "python": lock.python, "torch": lock.torch, "torch-cuda": lock.torch_cuda, **family_pins,
        "deepspeed": lock.deepspeed, "fabric": lock.fabric, **_fabric_labels(lock), **family_targets,
    }
    values = {
        "org.opencontainers.image.title": lock.name,
        "org.opencontainers.image.description": lock.description,
        "org.opencontainers.image.version": lock.content_hash,
        f"{LABEL_PREFIX}.lock-hash": lock.content_hash,
        f"{LABEL_PREFIX}.tools-hash": tools_hash(lock),
    }
    values.update({f"{LABEL_PREFIX}.{k}": v for k, v in pins.items() if v})
    return values


def _fabric_labels(lock: Lock) -> dict[str, str]:
    """The fabric section's pins as labels (efa-installer, aws-ofi-nccl; tcpxo-plugin, tcpxo-rxdm; ...)."""
    fabric = fabrics.get(lock.fabric)
    section = getattr(lock, fabric.lock_section) if fabric else None
    return fabric.labels(section) if section is not None else {}


def render_values(lock: Lock, base_ref: str, options: BuildOptions = BuildOptions()) -> dict[str, Any]:
    os_builders, os_fragments = [], ["image/os-user.j2"]
    if os_packages(lock):  # the mirror is used to download in a builder stage; the os stage installs the files
        os_builders.append("image/apt-download.j2")
        os_fragments.insert(0, "image/os-apt.j2")
    groups = [g for g in GROUPS if lock.group(g)]
    python_layers = [
        {"group": g, "stage": f"layer-{g}", "parent": "pip" if i == 0 else f"layer-{groups[i - 1]}",
         "prefix": layer_prefix(g), "earlier": [layer_prefix(e) for e in groups[:i]],
         "template": "image/layer-python.j2", "toolchain": None, "build_env": {}}
        for i, g in enumerate(groups)
    ]
    if lock.deepspeed_ops and python_layers[-1]["group"] == "project":  # the ops build where DeepSpeed installs
        project_layer = python_layers[-1]
        project_layer["toolchain"] = {
            "stage": TOOLCHAIN, "parent": project_layer["parent"], "packages": lock.deepspeed_ops.compiler_packages,
            "components": lock.deepspeed_ops.compiler_components, "wrapper": CXX_WRAPPER}
        project_layer["parent"], project_layer["build_env"] = TOOLCHAIN, ops_build_env(lock)
    image_layers = list(python_layers)
    family = accelerators.of_lock(lock)
    if family and family.image_layer:  # the family's own layer (Ascend: CANN's version and environment)
        image_layers.append({"template": family.image_layer, **family.layer_values(lock)})
    fabric = _fabric_layer(lock)
    if fabric:  # last: the image without it is the stem every fabric shares (a lock that extends another)
        image_layers.append(fabric)
    pip_env = {"PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    if options.ca_cert:
        pip_env["PIP_CERT"] = "/tmp/goldenenv-build/ca-bundle.pem"
    if options.wheelhouse:
        pip_env["PIP_FIND_LINKS"] = "/tmp/goldenenv-build/wheelhouse"
    return {
        "name": lock.name, "lock_hash": lock.content_hash, "base_ref": base_ref, "base_note": base_note(lock),
        "os_builders": os_builders, "os_fragments": os_fragments, "os_packages": os_packages(lock),
        "package_secrets": list(PACKAGE_SECRETS) if lock.slurm else [],
        "uid": UID, "user": lock.user,
        "pip_env": pip_env, "pip_args": ["PIP_INDEX_URL"] if options.pip_index_url else [],
        "python_layers": python_layers, "image_layers": image_layers,
        "env": env(lock), "labels": labels(lock),
        "node_tools": [{"source": name, "target": tool.target} for name, tool in node_tools(lock).items()],
    }


def base_note(lock: Lock) -> str | None:
    """What the Dockerfile says of a base pinned by tag only (the lock's base.unverifiedImage); None otherwise."""
    if not lock.base.unverified_image:
        return None
    return (f"UNVERIFIED BASE: {lock.base.unverified_image} is pinned by tag, not by digest (no public source gives "
            "its digest): the same lock may build on another image. Pin base.image to repo@sha256:... read from the "
            "registry before building.")


def layer_prefix(group: str) -> str:
    """Where a group's builder stage installs its packages (pip --prefix), the tree the image copies into /opt/venv.

    Each group has its own: a later stage inherits the earlier trees where they are and sees them through a .pth
    file of its venv (a source build, DeepSpeed's, imports torch), so no stage copies them (a copy of torch's tree
    is another gigabyte written and committed)."""
    return f"/opt/layer-{group}"


def _fabric_layer(lock: Lock) -> dict[str, Any] | None:
    """The fabric's image layer (fabrics registry: its template, values from the lock's fabric section)."""
    fabric = fabrics.get(lock.fabric)
    section = getattr(lock, fabric.lock_section) if fabric else None
    return fabric.image_values(section) if section is not None else None


def dockerfile(lock: Lock, base_ref: str, options: BuildOptions = BuildOptions()) -> str:
    return render("image/Dockerfile.j2", **render_values(lock, base_ref, options))


def build_args(options: BuildOptions) -> dict[str, str]:
    args = {}
    if options.pip_index_url:
        args["PIP_INDEX_URL"] = options.pip_index_url
    if options.apt_mirror:
        args["APT_MIRROR"] = options.apt_mirror
    return args


def write_context(lock: Lock, base_ref: str, options: BuildOptions, directory: Path) -> Path:
    """A build context holding only what the build needs: no repository files, no secrets beyond build/."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Dockerfile").write_text(dockerfile(lock, base_ref, options))
    for group in GROUPS:
        if lock.group(group):
            (directory / f"requirements-{group}.txt").write_text(requirements(lock, group))
    if lock.deepspeed_ops:
        ops = lock.deepspeed_ops
        (directory / "goldenenv-cxx").write_text(render("image/goldenenv-cxx.j2", compiler=ops.compiler,
                                                        cpu_arch=ops.cpu_arch, simd=SIMD[ops.cpu_arch]))
        (directory / "goldenenv-cxx").chmod(0o755)
    (directory / "requirements-tool.txt").write_text(_requirement_line(lock, TOOL) + "\n")
    for name, tool in node_tools(lock).items():  # COPY keeps the mode: the classic builder has no --chmod
        (directory / name).write_bytes(tool.content)
        (directory / name).chmod(tool.mode)
    build = directory / "build"
    build.mkdir(exist_ok=True)
    (build / "README").write_text("Build options only (extra CA, wheelhouse); used in builder stages.\n")
    if options.ca_cert:
        system = Path("/etc/ssl/certs/ca-certificates.crt")
        bundle = (system.read_text() if system.is_file() else "") + "\n" + options.ca_cert.read_text()
        (build / "ca-bundle.pem").write_text(bundle)
    if options.wheelhouse:
        (build / "wheelhouse").mkdir(exist_ok=True)
        for wheel in _pinned_wheels(lock, options.wheelhouse):
            shutil.copy2(wheel, build / "wheelhouse" / wheel.name)
    return directory


def _pinned_wheels(lock: Lock, wheelhouse: Path) -> list[Path]:
    """Files in the wheelhouse whose name and version the lock pins (the hash is checked by pip)."""
    wanted = {(name.replace("-", "_").lower(), pin.version) for name, pin in lock.packages.items()}
    found = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        name, version = urllib.parse.unquote(wheel.name).split("-")[:2]
        if (name.lower(), version) in wanted:
            found.append(wheel)
    return found

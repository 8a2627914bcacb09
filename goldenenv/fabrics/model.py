"""What a fabric is: the Fabric record every fabric folder fills in, the pieces it may declare (sidecars, env
files, its NCCL plugin), and the field types of the lock's fabric sections (every value that reaches a Dockerfile
has a pattern). The fabrics themselves live one folder each beside this module (goldenenv/fabrics/<name>/), found by
goldenenv.fabrics without a list to edit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

from pydantic import Field

from goldenenv import catalog
from goldenenv.spec import Model

Version = Annotated[str, Field(pattern=r"^\d+(\.\d+)*$", description="a version of numbers and dots such as 1.9.4")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
DebianPackage = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9+.-]+(=([0-9]+:)?[0-9][A-Za-z0-9.+~-]*)?$",
                                     description="a Debian package name, with =version or without, such as "
                                                 "libibverbs1 or libibverbs1=44.0-2")]
"""A Debian package name (policy 5.6.1), optionally =version in Debian's version alphabet: one shell word."""
ReleaseTag = Annotated[str, Field(pattern=r"^\d+(\.\d+)*([-_][0-9A-Za-z]+)?$", max_length=40,
                                  description="a release such as 1.9.4 or 1.13.2-aws")]
"""A release as Google tags its GPUDirect images (without the leading v): 1.0.12, 1.0.8-1, 1.0.13_1."""
PackageVersion = Annotated[str, Field(pattern=r"^\d+(\.\d+)*(-[0-9A-Za-z.+~]+)?$", max_length=60,
                                      description="a package version such as 2.4.1 or 24.10-1.1.4.0")]
"""An upstream release, optionally with its package revision: 1.1.0, 1.1.0-1."""


class RdmaPackages(Model):
    """rdma-core's userspace from the base's distribution, for a fabric whose image needs nothing else: the verbs
    library, the provider of the fabric's devices, and the tools the node health judge runs."""

    packages: list[DebianPackage] = Field(min_length=1)
    """Debian package names (optionally =version), installed by the fabric's image layer."""


class Sidecar(NamedTuple):
    """A daemon the fabric needs on the host beside the golden container (Google's RxDM): its own container, run by a
    unit of its own that starts before the golden container and is restarted with it (goldenenv.nodeboot)."""

    name: str
    """Its unit is goldenenv-<name>.service and its container goldenenv-<name>."""
    label: str
    """As people write it, in logs and unit descriptions."""
    image: Callable[[Any], str]
    """Its image reference from the lock's fabric section: repository:tag, or repository:tag@sha256:... where the
    lock pins the digest."""
    options: tuple[str, ...]
    """`docker run` options (privileges, network, volumes, env) as its publisher runs it."""
    command: tuple[str, ...]
    """Its arguments after the image."""
    ready: str
    """The line its log prints once it serves: the golden container waits for it."""


class EnvFile(NamedTuple):
    """A shell file in the golden image that sets the fabric's tuning (Google's set_nccl_env.sh, nccl-env-profile.sh),
    sourced with `env` set: the node evaluates it once per boot into the golden container's environment, so every
    process there has it (slurmd and its jobs, `docker exec`), not only login shells."""

    path: str
    env: dict[str, str] = {}


class Plugin(NamedTuple):
    """The NCCL plugin a fabric's lock section pins."""

    field: str
    """The section's field holding its version (aws_ofi_nccl, plugin)."""
    key: str
    """That field as the lock writes it (awsOfiNccl, plugin)."""
    name: str
    """As people write it (aws-ofi-nccl, nccl-gib)."""
    component: str
    """Its name in catalog fabric_env's conditions (aws_ofi_nccl<=1.5.0)."""


@dataclass(frozen=True)
class Fabric:
    name: str
    """As the catalog and locks write it: efa | erdma | tcpx | tcpxo | gib | ib."""
    label: str
    """As people write it: EFA | eRDMA | GPUDirect-TCPX | GPUDirect-TCPXO | gIB | InfiniBand."""
    cloud: str
    """The cloud whose nodes carry it: that cloud's folder lays out its interfaces (a node's network cards are the
    cloud's business, not the fabric's)."""
    image_layer: str
    """The image layer's template, by its name under a templates/ folder (image/layer-<fabric>.j2, in the fabric's
    own goldenenv/fabrics/<fabric>/templates/)."""
    lock_section: str
    """The lock's section that pins the fabric's software (efa: installer + plugin; erdma, ib: packages)."""
    section: type[Model]
    """The pydantic model of that section: what the lock may write there, each value with a pattern."""
    boot_check: tuple[str, str] | None = None
    """(systemd unit, script) under node/ of the fabric's templates/ that checks the fabric on every boot before the
    golden container starts (driver, one device per interface, MTU); None: the host image's own setup is trusted."""
    layer_values: Callable[[Any], dict[str, Any]] = lambda section: {}
    """What the image layer's template renders from the lock's section."""
    plugin: Plugin | None = None
    """The NCCL plugin the section pins, which catalog fabric_min_nccl's min_plugin and fabric_env's conditions
    compare; None: no versioned plugin."""
    libraries: str = ""
    """Where the image layer puts the NCCL plugin (LD_LIBRARY_PATH of the image); empty: the system's."""
    plugin_library: str | None = None
    """The plugin library the checks expect in a built image, where the layer puts it (None: checked otherwise)."""
    labels: Callable[[Any], dict[str, str]] = lambda section: {}
    """The image's labels (dev.goldenenv.<name>) for the section's pins."""
    health: str | None = None
    """How the node health judge (goldenenv.health.judge FABRICS) counts this fabric's devices; None: by the
    fabric's own name (efa, erdma, ib: ibstat's InfiniBand ports, one per rdma_interfaces). `none`: the judge counts
    none, and the fabric's boot check is what proves its NICs (Google's GPU NICs are gVNICs, or RoCE ports that
    ibstat lists with link layer Ethernet, which the judge's InfiniBand count would read as missing)."""
    host_mounts: tuple[str, ...] = ()
    """Host paths the golden container gets read-only at the same path, because the host image configures NCCL
    for the fabric there (Azure's HPC images: /etc/nccl.conf naming the VM size's topology file under
    /opt/microsoft). The fabric's boot check proves they exist before the container starts: Docker would create a
    missing bind source as an empty folder."""
    kernel_modules: tuple[str, ...] = ()
    """Kernel modules the host must have loaded, as lsmod names them: the boot check loads and asserts each, and a
    pool whose host image lacks one (catalog host_images kernel_modules) is refused at plan (compat)."""
    devices: tuple[str, ...] = ()
    """Device nodes the golden container gets (`--device`): the boot check proves each exists first."""
    device_dirs: tuple[str, ...] = ()
    """Host folders of device files the golden container gets read-write at the same path (the aperture devices'
    bound PCI resources, which NCCL maps): the boot check makes and proves each."""
    host_image_hint: str = ""
    """Where to get a host image with the kernel modules, for the message that refuses one without them."""
    sidecars: tuple[Sidecar, ...] = ()
    """Daemons the host runs beside the golden container, each in a unit started before it and restarted with it."""
    env_files: tuple[EnvFile, ...] = ()
    """The fabric's own env files in the golden image, evaluated into the golden container's environment (the
    catalog's fabric_env values are applied after them, so the node's interface names win)."""

    @property
    def health_fabric(self) -> str:
        return self.health or self.name

    def env(self) -> dict[str, str]:
        """What NCCL needs on a node of this fabric (catalog fabric_env, each value sourced)."""
        return catalog.fabric_env(self.name)

    def min_nccl(self, instance_type: str = "*") -> list[dict[str, str]]:
        """The catalog's NCCL (and plugin) floors for this fabric: `*` rows hold for every instance type."""
        return [r for r in catalog.rows("fabric_min_nccl")
                if r["fabric"] == self.name and r["instance_type"] == instance_type]

    def min_cuda(self) -> str | None:
        """The fabric's CUDA floor (catalog fabric_min_cuda), or None when it has none."""
        return next((r["min_cuda"] for r in catalog.rows("fabric_min_cuda") if r["fabric"] == self.name), None)

    def mtu(self, cloud: str, instance_type: str) -> catalog.FabricMtu | None:
        """The interfaces' MTU (and the NCCL protocols it allows) for this type: catalog fabric_mtu, by whether
        catalog node_layout says the type runs jumbo frames; None when the fabric sets no MTU."""
        layout = catalog.node_layout(cloud, instance_type)
        return catalog.fabric_mtu(self.name, bool(layout and layout.jumbo_frames))

    def image_values(self, section: Any) -> dict[str, Any]:
        """The image layer's template and the values it renders from the lock's fabric section."""
        return {"template": self.image_layer, **self.layer_values(section)}

    def plugin_pin(self, section: Any) -> tuple[str, str, str] | None:
        """(the plugin's key as the lock writes it, its pinned version, the plugin's name), or None."""
        if self.plugin is None or section is None:
            return None
        return f"{self.lock_section}.{self.plugin.key}", getattr(section, self.plugin.field), self.plugin.name

    def versions(self, section: Any) -> dict[str, str]:
        """The section's versions by the names catalog fabric_env's conditions use (aws_ofi_nccl<=1.5.0)."""
        if self.plugin is None or section is None:
            return {}
        return {self.plugin.component: getattr(section, self.plugin.field)}

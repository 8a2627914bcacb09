"""RDMA and GPU-direct fabrics by name: what each one is, wherever goldenenv needs to know.

A fabric (EFA on AWS, eRDMA on Alibaba Cloud, GPUDirect-TCPX/TCPXO and gIB on Google Cloud, InfiniBand on Azure)
brings five things: how its interfaces sit on a node's network cards (the cloud's layout function), the layer a golden
image adds for it (a template under templates/image/ and the lock section that pins it, with the section's model), the
environment NCCL needs on a node (catalog fabric_env, any env files of the fabric's own, and any host files the golden
container reads), what its host must run and expose (kernel modules, sidecar daemons, device nodes: goldenenv.nodeboot
turns that declaration into the boot units, the boot check's expectations and the golden container's run, and compat
refuses a host image without the modules), and the rules a lock must meet (catalog fabric_min_nccl and
fabric_min_cuda, plus any fabric-specific check in compat). Code asks this registry, never `if fabric ==`: a new
fabric is one entry here, its catalog rows and its templates.

The field types of the lock sections live here too, below the lock (images/lock.py imports them from here): every
value that reaches a Dockerfile has a pattern.
"""

from __future__ import annotations

import importlib
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


class Efa(Model):
    installer: Version
    installer_sha256: Sha256 | None = None
    """sha256 of aws-efa-installer-<installer>.tar.gz; the build refuses a tarball it cannot verify."""
    aws_ofi_nccl: Version
    """The plugin the installer bundles; must match the catalog's efa_installer table."""


class RdmaPackages(Model):
    """rdma-core's userspace from the base's distribution, for a fabric whose image needs nothing else: the verbs
    library, the provider of the fabric's devices, and the tools the node health judge runs."""

    packages: list[DebianPackage] = Field(min_length=1)
    """Debian package names (optionally =version), installed by the fabric's image layer."""


class Erdma(RdmaPackages):
    """eRDMA: the erdma verbs provider is in ibverbs-providers since rdma-core 42."""


class Ib(RdmaPackages):
    """InfiniBand on Azure's ND VMs: the mlx5 verbs provider (ibverbs-providers) for NCCL's IB transport, and ibstat
    (infiniband-diags) and ib_write_bw (perftest), which the node health judge runs for this fabric. NCCL, the
    driver and the topology file are the host image's: the golden container reads them from host_mounts."""


class GpuDirectTcp(Model):
    """Google's GPUDirect-TCPX(O) NCCL plugin and the receive-datapath manager (RxDM) released with it: Google
    publishes them as a coupled pair (container-engine-accelerators gpudirect-tcpxo/README.md)."""

    plugin: ReleaseTag
    """The tag of nccl-plugin-gpudirecttcpx-dev (without v): the image layer copies the plugin from it."""
    rxdm: ReleaseTag
    """The tag of tcpgpudmarxd-dev (without v), the RxDM the node runs beside the golden container."""
    rxdm_digest: Sha256 | None = Field(default=None, exclude_if=lambda v: v is None)
    """The sha256 of that tag's image, where a public source gives it: the node then pulls RxDM by digest. None: by
    the tag alone (Google's release notes list tags only), which the node's RxDM unit says when it starts. Unset, it
    is left out of the lock's identity, so the image's tag stays what it was."""


class Gib(Model):
    plugin: PackageVersion
    """The nccl-gib package (gIB NCCL plugin with its own NCCL, under /usr/local/gib), from Google's apt repo."""


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
    layout: str
    """`module:function` laying out the fabric's interfaces on a node; imported only when called."""
    image_layer: str
    """The image layer's template under templates/image/."""
    lock_section: str
    """The lock's section that pins the fabric's software (efa: installer + plugin; erdma, ib: packages)."""
    section: type[Model]
    """The pydantic model of that section: what the lock may write there, each value with a pattern."""
    boot_check: tuple[str, str] | None = None
    """(systemd unit, script) under templates/node/ that checks the fabric on every boot before the golden
    container starts (driver, one device per interface, MTU); None: the host image's own setup is trusted."""
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

    def layout_function(self) -> Callable[..., list[Any]]:
        module, _, function = self.layout.partition(":")
        return getattr(importlib.import_module(module), function)

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


def _tcp_layer(repository: str, libraries: str) -> Callable[[GpuDirectTcp], dict[str, Any]]:
    return lambda section: {"image": f"{repository}:v{section.plugin}", "libraries": libraries}


TCPX_LIBRARIES = "/var/lib/tcpx/lib64"
TCPXO_LIBRARIES = "/var/lib/tcpxo/lib64"
"""Where Google's installers put the plugins on a host (blueprints' LD_LIBRARY_PATH); the image layer puts them at
the same path, so a job written for Google's host install finds them in the golden container too."""
GIB_LIBRARIES = "/usr/local/gib/lib64"
"""Where the nccl-gib package installs (Google's docs: all NCCL/gIB content is installed under /usr/local/gib)."""
GIB_ENV_FILE = "/usr/local/gib/scripts/set_nccl_env.sh"
"""gIB's NCCL tuning, from the nccl-gib package (Google's 'Run NCCL on Compute Engine instances': source it)."""
GPUDIRECT_REGISTRY = "us-docker.pkg.dev/gce-ai-infra"
APERTURE_DEVICES = "/dev/aperture_devices"
"""Where an A3 Mega host binds its aperture devices (PCI 1ae0:0084), one folder per PCI function: Cluster Toolkit's
a3mega-slurm-blueprint udev rule, and NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY in catalog fabric_env."""
IMPORT_HELPER = "/dev/dmabuf_import_helper"
"""The misc device the dmabuf-import-helper kernel module (import_helper) registers, which RxDM and the TCPXO plugin
open (google/nccl-plugin-gpudirect-tcpxo's import-helper source: miscdevice "dmabuf_import_helper")."""


def _image(repository: str, tag: Callable[[Any], str], digest: Callable[[Any], str | None]) -> Callable[[Any], str]:
    def ref(section: Any) -> str:
        pinned = digest(section)
        return f"{repository}:v{tag(section)}" + (f"@sha256:{pinned}" if pinned else "")
    return ref


TCPXO_HOST_IMAGE = ("an image built as Cluster Toolkit's a3mega-slurm-blueprint builds its own (its image group "
                    "installs the dmabuf-import-helper DKMS package from Google's gpudirect-tcpxo-apt repository "
                    "and the aperture devices' udev rule)")
ERDMA_HOST_IMAGE = ("an image of yours with Alibaba's eRDMA driver (its erdma_installer, or the public image's "
                    "automatic eRDMA install at creation): Alibaba publishes it as an installer script, with no signed "
                    "apt repository or checksum a host lock could pin")
RXDM_TCPXO = Sidecar(
    "rxdm", "GPUDirect-TCPXO receive-datapath manager (RxDM)",
    _image(f"{GPUDIRECT_REGISTRY}/gpudirect-tcpxo/tcpgpudmarxd-dev", lambda s: s.rxdm, lambda s: s.rxdm_digest),
    ("--cap-add=NET_ADMIN", "--network=host", "--privileged", "--gpus", "all",
     "--volume", "/var/lib/nvidia/lib64:/usr/local/nvidia/lib64",
     "--volume", f"{IMPORT_HELPER}:{IMPORT_HELPER}", "--env", "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu"),
    ("--num_hops=2", "--num_nics=8"),
    "Buffer manager initialization complete")
"""As Google's Slurm prolog runs it (slurm-gcp tools/prologs-epilogs/receive-data-path-manager-mega, which Cluster
Toolkit's a3mega-slurm-blueprint installs), with the flags of the open-source RxDM from v1.0.18 on
(google/nccl-plugin-gpudirect-tcpxo README: `--num_hops=2 --num_nics=8`; --uid= and --alsologtostderr retired), and
the line the prolog waits for. With --network=host on both, RxDM and the plugin meet on the host's UNIX sockets."""
AZURE_HPC_NCCL = ("/etc/nccl.conf", "/opt/microsoft")
"""What Azure's Ubuntu HPC images write for NCCL on every boot of an ND VM (azhpc-images setup_sku_customizations.sh,
components/customizations/ndv4.sh and ndv5.sh): /etc/nccl.conf with NCCL_IB_PCI_RELAXED_ORDERING=1,
NCCL_IGNORE_CPU_AFFINITY=1 and NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml (ndv4/topo.xml on ND A100 v4), a link to
the topology file beside it. The golden container reads the host's, so the values follow the pinned host image and
the VM size, and are written nowhere else."""

FABRICS: dict[str, Fabric] = {
    "efa": Fabric(
        "efa", "EFA", "aws", "goldenenv.clouds.aws.efa:interface_layout", "image/layer-efa.j2", "efa", Efa,
        layer_values=lambda s: {"installer": s.installer, "sha256": s.installer_sha256},
        plugin=Plugin("aws_ofi_nccl", "awsOfiNccl", "aws-ofi-nccl", "aws_ofi_nccl"),
        libraries="/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib",
        labels=lambda s: {"efa-installer": s.installer, "aws-ofi-nccl": s.aws_ofi_nccl}),
    "erdma": Fabric(
        "erdma", "eRDMA", "alicloud", "goldenenv.clouds.alicloud.erdma:eri_layout", "image/layer-erdma.j2", "erdma",
        Erdma, ("goldenenv-erdma.service", "erdma-check.sh"), layer_values=lambda s: {"packages": s.packages},
        kernel_modules=("erdma",), host_image_hint=ERDMA_HOST_IMAGE),
    "tcpx": Fabric(
        "tcpx", "GPUDirect-TCPX", "gcp", "goldenenv.clouds.gcp.network:gpu_nic_layout", "image/layer-tcpxo.j2",
        "tcpx", GpuDirectTcp,
        layer_values=_tcp_layer(f"{GPUDIRECT_REGISTRY}/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev", TCPX_LIBRARIES),
        plugin=Plugin("plugin", "plugin", "nccl-plugin-gpudirecttcpx", "tcpx_plugin"), libraries=TCPX_LIBRARIES,
        plugin_library=f"{TCPX_LIBRARIES}/libnccl-net.so",
        labels=lambda s: {"tcpx-plugin": s.plugin, "tcpx-rxdm": s.rxdm}, health="none"),
    "tcpxo": Fabric(
        "tcpxo", "GPUDirect-TCPXO", "gcp", "goldenenv.clouds.gcp.network:gpu_nic_layout", "image/layer-tcpxo.j2",
        "tcpxo", GpuDirectTcp, ("goldenenv-tcpxo.service", "tcpxo-check.sh"),
        layer_values=_tcp_layer(f"{GPUDIRECT_REGISTRY}/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev",
                                TCPXO_LIBRARIES),
        plugin=Plugin("plugin", "plugin", "nccl-plugin-gpudirecttcpx", "tcpxo_plugin"), libraries=TCPXO_LIBRARIES,
        plugin_library=f"{TCPXO_LIBRARIES}/libnccl-net.so",
        labels=lambda s: {"tcpxo-plugin": s.plugin, "tcpxo-rxdm": s.rxdm}, health="none",
        kernel_modules=("import_helper",), devices=(IMPORT_HELPER,), device_dirs=(APERTURE_DEVICES,),
        host_image_hint=TCPXO_HOST_IMAGE, sidecars=(RXDM_TCPXO,),
        env_files=(EnvFile(f"{TCPXO_LIBRARIES}/nccl-env-profile.sh", {"NCCL_LIB_DIR": TCPXO_LIBRARIES}),)),
    "gib": Fabric(
        "gib", "gIB", "gcp", "goldenenv.clouds.gcp.network:gpu_nic_layout", "image/layer-gib.j2", "gib", Gib,
        ("goldenenv-gib.service", "gib-check.sh"), layer_values=lambda s: {"plugin": s.plugin},
        plugin=Plugin("plugin", "plugin", "nccl-gib", "nccl_gib"), libraries=GIB_LIBRARIES,
        plugin_library=f"{GIB_LIBRARIES}/libnccl-net.so", labels=lambda s: {"nccl-gib": s.plugin}, health="none",
        env_files=(EnvFile(GIB_ENV_FILE),)),
    "ib": Fabric(
        "ib", "InfiniBand", "azure", "goldenenv.clouds.azure.nodes:ib_layout", "image/layer-ib.j2", "ib", Ib,
        ("goldenenv-ib.service", "ib-check.sh"), layer_values=lambda s: {"packages": s.packages},
        host_mounts=AZURE_HPC_NCCL),
}


def get(name: str) -> Fabric | None:
    """The fabric of that name; None for `none` (no RDMA)."""
    return FABRICS.get(name)


def label(name: str) -> str:
    fabric = FABRICS.get(name)
    return fabric.label if fabric else name


def sections() -> tuple[str, ...]:
    """Every fabric's lock section, in the registry's order."""
    return tuple(dict.fromkeys(f.lock_section for f in FABRICS.values()))

"""The Ascend NPU nodes on Huawei Cloud: a pool whose instance type's accelerator family is Ascend is a set of
ModelArts Lite Servers (devserver.DevServer, one per node) rather than ECS instances: bare metal on arm64, on the
stack's subnet in the node security group (members only), no public address (CreateDevServer gives none unless
asked), the stack's key pair to log in (no password is ever set), the boot's cloud-config as user data, paid by use.

What a Lite Server does not take, unlike an ECS node: tags (CreateDevServer has no tags field: the stop function finds
the servers by their name prefix), spot (ChargingInfo has no spot mode), and a server group (RoCE locality comes
with the flavor's RoCE network). Its IAM agency (the pool's, as an ECS pool's: SWR login, munge key, bucket) is set
by the server resource after creation (devserver._set_agency). The pool is the same component type as an ECS pool
(goldenenv:huawei:GpuNodePool, with its wantedUserData), so rolling and the node-update report treat both alike: a
changed boot script replaces a server only when `goldenenv up --roll-nodes` rolls it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi

from goldenenv import accelerators, catalog
from goldenenv.clouds.huawei.basics import CLOUD, host_image
from goldenenv.clouds.huawei.devserver import DevServer, server_name
from goldenenv.clouds.huawei.nodes import HostAgencyArgs, host_agency
from goldenenv.nodehost import default_image
from goldenenv.spec import Capacity, ClusterSpec, Problem

LITE_ROOT_MIN_GIB = 100
"""CreateDevServer's root volume takes 100 to 1024 GB (EvsVolume size, huaweicloudsdkmodelarts 3.1.219)."""


def is_lite_server(instance_type: str) -> bool:
    """Whether a catalog instance type of Huawei's is sold as a Lite Server: its accelerator family is one whose
    devices are not NVIDIA's (Ascend), which ModelArts sells and ECS does not."""
    it = catalog.instance_types(CLOUD).get(instance_type)
    if it is None or it.gpu is None:
        return False
    family = accelerators.of_device(it.gpu.name)
    return family is not None and family.name != "cuda"


def lite_server_types() -> list[str]:
    """The catalog's Lite Server flavors."""
    return sorted(name for name in catalog.instance_types(CLOUD) if is_lite_server(name))


def _arm64(name: str) -> bool:
    """Whether a catalog host image is an arm64 one (its kernel is built for aarch64)."""
    image = catalog.host_images(CLOUD).get(name)
    return bool(image and image.kernel.endswith("aarch64"))


def pool_problems(spec: ClusterSpec, pool: object, at: str) -> list[Problem]:
    """What a Lite Server pool may not ask for: spot (ChargingInfo has no spot mode: COMMON, POST_PAID, PRE_PAID),
    no key pair (a Lite Server logs in by key pair or password, and goldenenv sets no password), an x86 host image
    (the Snt9B servers are arm64)."""
    problems = []
    if Capacity.SPOT in pool.capacities:
        problems.append(Problem(f"{at}.capacity", f"{pool.instance_type} is a ModelArts Lite Server, which Huawei "
                                "sells on demand or by subscription only (no spot); use capacity: on-demand"))
    if pool.ssh_key is None:
        problems.append(Problem(f"{at}.sshPublicKey", f"{pool.instance_type} is a ModelArts Lite Server, which logs "
                                "in by key pair or password, and goldenenv sets no password: set sshPublicKey to "
                                "your OpenSSH public key (ssh-ed25519 AAAA... you@host)"))
    image = getattr(pool, "host_image", None)
    if isinstance(image, str) and image in catalog.host_images(CLOUD) and not _arm64(image):
        arm = ", ".join(n for n in catalog.host_images(CLOUD) if _arm64(n)) or "none"
        problems.append(Problem(f"{at}.hostImage", f"{image!r} is an x86 image and {pool.instance_type} is an arm64 "
                                f"Lite Server; valid: {arm}, or {{id: <a Lite Server image UUID>}}"))
    return problems


def plan_notes(spec: ClusterSpec) -> list[str]:
    """What the plan cannot show of a stack's Lite Servers."""
    flavors = sorted({p.instance_type for p in spec.nodes if is_lite_server(p.instance_type)})
    if not flavors:
        return []
    return [f"ModelArts Lite Servers ({', '.join(flavors)}): flavors need a service ticket, and whether the zone "
            "sells one now is known only to the account (ListDevServerFlavors is_sold_out): up checks it before "
            "buying and stops with the flavor and zone named when it is sold out. A Lite Server takes no tags: the "
            f"stop function finds this stack's by their names, {spec.stack and f'goldenenv-{spec.stack}-'}<pool>-<n>"
            ] + _driver_notes(spec)


def _driver_notes(spec: ClusterSpec) -> list[str]:
    """The NPU driver the lock's CANN needs against the Lite Server's host image: the catalog holds the driver a
    Huawei image carries only in its source's words, so the plan cannot prove the pair and says what to check."""
    from goldenenv.images.lock import load

    ascend = getattr(load(spec.image.lock), "ascend", None)
    if ascend is None:
        return []
    needs = (f"needs NPU driver {ascend.driver} (its table, accelerators/ascend/catalog/ascend_driver.csv)"
             if ascend.driver else "needs an NPU driver that no table the catalog holds pairs with it "
             "(accelerators/ascend/catalog/ascend_driver.csv)")
    pools = [p for p in spec.nodes if is_lite_server(p.instance_type)]
    images = sorted({_image_label(spec, p) for p in pools})
    carried = "".join(f" ({name} is published as {row.ami_name})" for name in images
                      for row in [catalog.host_images(CLOUD).get(name)] if row is not None)
    return [f"NPU driver: lock {spec.image.lock} (CANN {ascend.cann}) {needs}; the Lite Servers boot "
            f"{', '.join(images)}, whose driver the catalog gives only in its source's words{carried}: the pair is "
            "unproven here. Check `npu-smi info` (or /usr/local/Ascend/driver/version.info) on a server, or pin an "
            f"image with a driver CANN {ascend.cann} supports (nodes.hostImage {{id: <a Lite Server image UUID>}}, "
            "ListDevServerImages)"]


def _image_label(spec: ClusterSpec, pool: object) -> str:
    """A pool's host image as the stack names it: the catalog's by name (the pool's, or the one it boots by
    default), the pool's own by id."""
    image = getattr(pool, "host_image", None)
    if image is None:
        found = default_image(CLOUD, spec.region, accelerators.of_instance(CLOUD, pool.instance_type))
        return found.name if found is not None else "no catalog image"
    return image if isinstance(image, str) else f"{{id: {image.id}}}"


def lite_server_image(spec: ClusterSpec, pool: object) -> str:
    """The pool's pinned {id} or catalog image, else the catalog's image with the newest NPU driver for the region
    (host_images.csv npu_driver: Huawei's Snt9B bare-metal images, the Ascend driver, Ascend's docker runtime and
    Docker built in), the one the plan's host layer and compatibility checks judge (nodehost.default_image). A name
    is looked up by the server (ListDevServerImages)."""
    if getattr(pool, "host_image", None) is not None:
        return host_image(spec, pool)
    image = default_image(CLOUD, spec.region, accelerators.of_instance(CLOUD, pool.instance_type))
    if image is None:
        raise ValueError(f"the catalog has no Lite Server image for {spec.region}: set hostImage")
    return image.image_id


@dataclass(frozen=True, kw_only=True)
class LiteServerPoolArgs:
    stack: str
    pool: str
    flavor: str
    count: int
    region: str
    zone: str
    image: str
    """A Lite Server image's UUID, or its name (the server looks its ID up for the flavor)."""
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    key_pair: pulumi.Input[str]
    user_data: pulumi.Input[str]
    root_volume_gib: int
    policy: pulumi.Input[str]
    agency_name: str
    rolled: frozenset[int] = frozenset()


class LiteServerPool(pulumi.ComponentResource):
    """One pool's Lite Servers, goldenenv-<stack>-<pool>-<n>."""

    private_ips: pulumi.Output[list[str]]
    instance_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: LiteServerPoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:huawei:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        agency = host_agency(f"{name}-identity", HostAgencyArgs(name=args.agency_name, kind="node",
                                                                policy=args.policy, region=args.region), child)
        data = pulumi.Output.from_input(args.user_data)
        servers = [DevServer(
            f"{name}-{i}", region=args.region, server=server_name(args.stack, args.pool, i), flavor=args.flavor,
            image=args.image, zone=args.zone, vpc_id=args.vpc_id, subnet_id=args.subnet_id,
            security_group_id=args.security_group_id, key_pair=args.key_pair, user_data=data,
            root_volume_gib=args.root_volume_gib, agency_name=agency,
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["userData"] if i in args.rolled else None,
                                        ignore_changes=None if i in args.rolled else ["userData"]))
            for i in range(args.count)]
        self.private_ips = pulumi.Output.all(*[s.privateIp for s in servers])  # type: ignore[attr-defined]
        self.instance_ids = pulumi.Output.all(*[s.id for s in servers])
        wanted = data.apply(lambda d: {f"{name}-{i}": hashlib.sha256(d.encode()).hexdigest()
                                       for i in range(args.count)})
        self.register_outputs({"private_ips": self.private_ips, "instance_ids": self.instance_ids,
                               "wantedUserData": wanted})

"""A pool's host image (the machine image its nodes boot) and the accelerator driver it carries: the stack's own
`hostImage` {id, driver}, a catalog image by name, or the catalog's newest for the region and the pool's devices.

Read by the compatibility checks (compat.py), the host layer (images/host.py) and each cloud's pinned image
(clouds/base.py pinned_host_image); here, below all of them, it needs only the catalog and the accelerator families.
"""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv import accelerators, catalog


@dataclass(frozen=True)
class NodeHost:
    """The machine image a pool boots and the driver it carries for the pool's devices."""

    label: str
    driver: str | None
    image: catalog.HostImage | None = None
    override_id: str | None = None


def node_host(cloud: str, region: str, host_image: object, family: accelerators.Accelerator | None = None
              ) -> NodeHost:
    """The pool's host image: the stack's own {id, driver}, a catalog image by name, or the catalog's newest.

    `host_image` is the pool's `hostImage` value (None, a catalog name, or an object with id and driver). `family`
    is the accelerator family of the pool's devices (accelerators.of_instance): its driver is the one read from the
    catalog (CUDA's nvidia_driver, Ascend's npu_driver), and with no hostImage the pool boots default_image's.
    Without it (the Slurm head, callers that predate the families) the image is the catalog's newest and its driver
    the NVIDIA one, as before.
    """
    if host_image is not None and not isinstance(host_image, str):
        return NodeHost(f"hostImage {host_image.id} (driver {host_image.driver} as the stack declares)",
                        host_image.driver, None, host_image.id)
    image = (catalog.host_image(cloud, region, host_image) if host_image is not None or family is None
             else default_image(cloud, region, family))
    if image is None:
        return NodeHost("no pinned host image in the catalog", None)
    driver = getattr(image, family.host_driver) if family else image.nvidia_driver
    what = f"driver {driver}" if driver else f"no {family.driver_label if family else 'NVIDIA driver'}"
    return NodeHost(f"host image {image.name} ({what})", driver or None, image)


def default_image(cloud: str, region: str, family: accelerators.Accelerator) -> catalog.HostImage | None:
    """The host image a pool of this family's devices boots when it names none: the catalog's newest for the region
    that carries the family's driver (a tie on the release date goes to the newer driver); when none does, the
    newest that carries no other family's driver (an NVIDIA pool never boots Huawei's NPU image), else the newest.

    Every CUDA pool boots what it booted before the families: the clouds whose images carry an NVIDIA driver list
    it in their newest, and the others' images carry none."""
    usable = [h for h in catalog.host_images(cloud).values() if h.region in ("*", region)]
    carrying = [h for h in usable if getattr(h, family.host_driver)]
    if carrying:
        return max(carrying, key=lambda h: (h.released, catalog.version_tuple(getattr(h, family.host_driver))))
    others = [a.host_driver for a in accelerators.ACCELERATORS.values() if a.host_driver != family.host_driver]
    plain = [h for h in usable if not any(getattr(h, column) for column in others)]
    return (plain or usable or [None])[0]

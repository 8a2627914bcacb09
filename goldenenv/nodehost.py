"""A pool's host image (the machine image its nodes boot) and the NVIDIA driver it carries: the stack's own
`hostImage` {id, driver}, a catalog image by name, or the catalog's newest for the region.

Read by the compatibility checks (compat.py), the host layer (images/host.py) and each cloud's pinned image
(clouds/base.py pinned_host_image); here, below all of them, it needs only the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv import catalog


@dataclass(frozen=True)
class NodeHost:
    """The machine image a pool boots and the NVIDIA driver it carries."""

    label: str
    driver: str | None
    image: catalog.HostImage | None = None
    override_id: str | None = None


def node_host(cloud: str, region: str, host_image: object) -> NodeHost:
    """The pool's host image: the stack's own {id, driver}, a catalog image by name, or the catalog's newest.

    `host_image` is the pool's `hostImage` value (None, a catalog name, or an object with id and driver).
    """
    if host_image is not None and not isinstance(host_image, str):
        return NodeHost(f"hostImage {host_image.id} (driver {host_image.driver} as the stack declares)",
                        host_image.driver, None, host_image.id)
    image = catalog.host_image(cloud, region, host_image)
    if image is None:
        return NodeHost("no pinned host image in the catalog", None)
    driver = f"driver {image.nvidia_driver}" if image.nvidia_driver else "no NVIDIA driver"
    return NodeHost(f"host image {image.name} ({driver})", image.nvidia_driver or None, image)

"""Where host locks and the host images baked from them are filed: images/hosts/<name>.yaml, and beside it
<name>.published.yaml, the record `goldenenv host-image build` writes of each image it baked.

Below both the host layer (goldenenv.images.host, which boots a pool from a recorded image) and the bake
(goldenenv.images.bake, which writes the record): each reads this module, neither reads the other for it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from goldenenv.images.lock import folders

HOSTS = "hosts"
"""The folder of host locks inside an images folder: images/hosts/<name>.yaml."""
PUBLISHED_SUFFIX = ".published.yaml"
"""A host lock's record of the images baked from it: images/hosts/<name>.published.yaml."""


@dataclass(frozen=True)
class BakedImage:
    cloud: str
    region: str
    base: str
    layer: str
    image: str
    hostLock: str  # noqa: N815 - the file's key
    built: str


def published_path(host_lock_name: str, images_dir: Path | None = None) -> Path:
    """In the project's images/hosts/ (the first images folder), also for a host lock that comes from the package."""
    return folders(images_dir)[0] / HOSTS / f"{host_lock_name}{PUBLISHED_SUFFIX}"


def baked_images(host_lock_name: str, images_dir: Path | None = None) -> list[BakedImage]:
    path = published_path(host_lock_name, images_dir)
    if not path.is_file():
        return []
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return [BakedImage(**{k: str(entry.get(k, "")) for k in BakedImage.__dataclass_fields__})
            for entry in doc.get("published", []) if isinstance(entry, dict)]


def recorded(host_lock_name: str, cloud: str, region: str, base: str, digest: str,
             images_dir: Path | None = None) -> str | None:
    """The image baked from `base` with exactly this host layer (its digest) in this cloud and region, newest
    first; None when none was."""
    found = [b for b in baked_images(host_lock_name, images_dir)
             if (b.cloud, b.region, b.base, b.layer) == (cloud, region, base, digest)]
    return max(found, key=lambda b: b.built).image if found else None


def record(host_lock_name: str, entry: BakedImage, images_dir: Path | None = None) -> Path:
    """Add a baked image, replacing an older one of the same cloud, region, base and layer."""
    kept = [b for b in baked_images(host_lock_name, images_dir)
            if (b.cloud, b.region, b.base, b.layer) != (entry.cloud, entry.region, entry.base, entry.layer)]
    path = published_path(host_lock_name, images_dir)
    header = ("# Written by `goldenenv host-image build`: host images with the host layer baked in, per cloud,\n"
              "# region, base image and layer digest. Pools whose layer matches boot from them; commit it with the\n"
              "# host lock.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump({"published": [asdict(b) for b in [*kept, entry]]}, sort_keys=False),
                    encoding="utf-8")
    return path

"""Cold start, modelled: from "instance running" to "torchrun can start" on a cloud node.

Boot (to cloud-init), installing the host layer at first boot (none with a baked host image), pulling the
golden image (compressed bytes ÷ the in-region pull rate), and mounting the parallel file system; each figure
comes from the catalog with its source, and the image's size from its push record or the local engine. The model
says which term dominates, and which figures no source measures (unverified).
"""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv import catalog

MB = 1_000_000
INSTALL, BAKED = "install", "baked"
"""How the host layer reaches the nodes: installed at first boot, or baked into their host image."""


@dataclass(frozen=True)
class Term:
    name: str
    seconds: float
    how: str


@dataclass(frozen=True)
class ColdStart:
    terms: tuple[Term, ...]
    target_seconds: float | None
    missing: tuple[str, ...]
    """What the model could not count (no catalog figure, image size unknown)."""
    unverified: tuple[str, ...] = ()
    """Terms counted with a catalog figure that no source measures (its source says unverified)."""

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.terms)

    @property
    def dominant(self) -> Term | None:
        return max(self.terms, key=lambda t: t.seconds, default=None)

    @property
    def meets_target(self) -> bool | None:
        return None if self.target_seconds is None or self.missing else self.seconds <= self.target_seconds

    def to_json(self) -> dict:
        return {
            "seconds": round(self.seconds, 1),
            "terms": [{"term": t.name, "seconds": round(t.seconds, 1), "how": t.how} for t in self.terms],
            "dominant": self.dominant.name if self.dominant and not self.missing else None,
            "targetSeconds": self.target_seconds,
            "meetsTarget": self.meets_target,
            "missing": list(self.missing),
            "unverified": list(self.unverified),
        }


def model(cloud: str, image_bytes: int | None, image_bytes_how: str, parallel_fs: bool,
          host_layer: str | None = None) -> ColdStart | None:
    """None when the catalog has no cold-start figures for this cloud. host_layer: INSTALL when a pool installs
    its host layer at first boot, BAKED when the pools boot baked images, None when nothing is installed."""
    figures = catalog.cold_start_terms(cloud)
    if not figures:
        return None
    terms, missing, unverified = [], [], []
    boot = figures.get("boot_to_cloud_init_s")
    if boot:
        terms.append(Term("boot", boot.value, "instance running to cloud-init (catalog cold_start)"))
    else:
        missing.append("boot time (no catalog figure)")
    install = figures.get("host_layer_install_s")
    if host_layer == BAKED:
        terms.append(Term("host layer", 0.0, "baked into the host image (goldenenv host-image build): nothing "
                          "installed at first boot"))
    elif host_layer == INSTALL and install is None:
        missing.append("host layer installed at first boot (no catalog figure)")
    elif host_layer == INSTALL:
        measured = not install.source.lower().startswith("unverified")
        terms.append(Term("host layer", install.value, "first boot installs the host layer (catalog cold_start"
                          + ("" if measured else "; unverified: no source measures it") + ")"))
        if not measured:
            unverified.append("host layer")
    rate = figures.get("ecr_pull_mbytes_per_s_low")
    if image_bytes is None:
        missing.append(f"image pull ({image_bytes_how})")
    elif rate:
        terms.append(Term("pull", image_bytes / (rate.value * MB),
                          f"{image_bytes / 1e9:.2f} GB {image_bytes_how} ÷ {rate.value:g} MB/s in-region "
                          "(the catalog's low end)"))
    else:
        missing.append("image pull (no catalog pull rate)")
    mount = figures.get("lustre_mount_s")
    if parallel_fs:
        if mount:
            terms.append(Term("mount", mount.value, "parallel file system mount (catalog cold_start)"))
        else:
            missing.append("parallel file system mount (no catalog figure)")
    target = figures.get("target_cold_start_s")
    return ColdStart(tuple(terms), target.value if target else None, tuple(missing), tuple(unverified))

"""Cold start, modelled: from "instance running" to "torchrun can start" on a cloud node.

Boot (to cloud-init), pulling the golden image (compressed bytes ÷ the in-region pull rate), and
mounting the parallel file system; each figure comes from the catalog with its source, and the
image's size from its push record or the local engine. The model says which term dominates.
"""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv import catalog

MB = 1_000_000


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
        }


def model(cloud: str, image_bytes: int | None, image_bytes_how: str, parallel_fs: bool) -> ColdStart | None:
    """None when the catalog has no cold-start figures for this cloud."""
    figures = catalog.cold_start_terms(cloud)
    if not figures:
        return None
    terms, missing = [], []
    boot = figures.get("boot_to_cloud_init_s")
    if boot:
        terms.append(Term("boot", boot.value, "instance running to cloud-init (catalog cold_start)"))
    else:
        missing.append("boot time (no catalog figure)")
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
    return ColdStart(tuple(terms), target.value if target else None, tuple(missing))

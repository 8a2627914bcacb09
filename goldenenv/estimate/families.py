"""NVIDIA and Ascend side by side: for each accelerator family (goldenenv.accelerators), the offers the estimate
found, with each device's and each node's memory, what the run needs per device, the hours at the run's scaling
and the cost, so that a user weighing a GPU cloud against Huawei's NPU servers reads them on one table.

Nothing here prices or times anything: it regroups the estimate's options (goldenenv.estimate.options) by the family
of their device (catalog gpus.csv's vendor column), in the registry's order, and picks per family and currency the
offer the estimate would recommend (the cheapest that fits, meets the deadline and is not ZeRO-3 over TCP), or says
why there is none. Currencies are never converted: an offer in CNY is not cheaper or dearer than one in USD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from goldenenv import accelerators


@dataclass(frozen=True)
class FamilyOffer:
    """One family's best offer in one currency (or, with offer None, why it has none)."""

    family: str
    """As people write it: NVIDIA CUDA | Huawei Ascend."""
    device_word: str
    """GPU | NPU."""
    currency: str | None
    offer: Any | None
    """The goldenenv.estimate.Option recommended for the family in this currency."""
    offers: int
    """How many options of the family the estimate priced or sized."""
    why_none: str | None = None

    def to_json(self) -> dict[str, Any]:
        o = self.offer
        return {"family": self.family, "device_word": self.device_word, "currency": self.currency,
                "offers": self.offers, "why_none": self.why_none,
                "cloud": o.cloud if o else None, "instance_type": o.instance_type if o else None,
                "device": o.gpu if o else None, "devices_per_node": o.gpus_per_node if o else None,
                "usable_gib_per_device": o.usable_gib_per_device if o else None,
                "usable_gib_per_node": o.usable_gib_per_node if o else None,
                "needed_gib_per_device": o.needed_gib_per_device if o else None,
                "nodes": o.nodes if o else None, "capacity": o.capacity if o else None,
                "scaling_efficiency": o.scaling_efficiency if o else None, "hours": o.hours if o else None,
                "cost": o.cost if o else None, "price_verified": o.price_verified if o else None,
                "price_region": o.price_region if o else None, "price_as_of": o.price_as_of if o else None}


def family_of(device: str) -> accelerators.Accelerator | None:
    """The family of a catalog device (None for one no family claims)."""
    return accelerators.of_device(device)


def side_by_side(options: list[Any], recommendable) -> list[FamilyOffer]:
    """Per family that has options, in the registry's order: its recommended offer per currency, cheapest first
    within the family; a family with options but none recommendable gets one row saying why."""
    rows: list[FamilyOffer] = []
    for family in accelerators.ACCELERATORS.values():
        own = [o for o in options if o.accelerator == family.label]
        if not own:
            continue
        best: dict[str, Any] = {}
        for o in own:
            if recommendable(o) and (o.currency not in best or o.cost < best[o.currency].cost):
                best[o.currency] = o
        if not best:
            rows.append(FamilyOffer(family.label, family.device_word, None, None, len(own), _why_none(own)))
        for currency, o in sorted(best.items(), key=lambda item: item[1].cost):
            rows.append(FamilyOffer(family.label, family.device_word, currency, o, len(own)))
    return rows


def _why_none(own: list[Any]) -> str:
    """Why no offer of a family is recommended, from what its options lack."""
    if not any(o.fits for o in own):
        return "the run does not fit its devices and hosts at any node count tried"
    if all(o.hours is None for o in own if o.fits):
        return "no hours: the catalog has no peak TFLOPS for its devices (gpu_peak_tflops)"
    if all(o.cost is None for o in own if o.fits):
        return "unpriced: the catalog has no price for its offers"
    return "none meets the deadline, or each would run ZeRO-3 over TCP (--allow-tcp to consider it)"

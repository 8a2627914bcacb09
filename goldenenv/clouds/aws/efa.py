"""Network interface layout of an EFA launch template, by AWS's current rules.

Card 0, device 0 is the primary interface and is always ENA (an EFA-only interface can never
be primary). If the type has EFA, card 0 also gets an `efa-only` interface at device 1, and
every further card one `efa-only` interface at device 0. A p5.48xlarge is thus 32 EFA + 1 ENA.
Source: AWS EC2 user guide, "Maximize network bandwidth on Amazon EC2 instances with multiple
network cards" (see shared/reference/FACTS.md).
"""

from __future__ import annotations

from dataclasses import dataclass

PRIMARY = "interface"
EFA_ONLY = "efa-only"


@dataclass(frozen=True)
class InterfaceSlot:
    network_card_index: int
    device_index: int
    interface_type: str


def interface_layout(network_cards: int, efa_interfaces: int) -> list[InterfaceSlot]:
    """One primary ENA, then one EFA-only interface on each of the first `efa_interfaces` cards."""
    if not 0 <= efa_interfaces <= network_cards:
        raise ValueError(
            f"{efa_interfaces} EFA interfaces do not fit {network_cards} network cards (one EFA per card)"
        )
    slots = [InterfaceSlot(0, 0, PRIMARY)]
    slots += [InterfaceSlot(card, 1 if card == 0 else 0, EFA_ONLY) for card in range(efa_interfaces)]
    return slots

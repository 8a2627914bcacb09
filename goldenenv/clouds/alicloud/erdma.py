"""Where a node's elastic RDMA interfaces (ERIs) go, by what pulumi-alicloud can give queue pairs to.

An ERI created without a queue-pair number takes the instance's whole QP budget, and then no other ERI can attach
(FACTS.md), so every ERI is created with an explicit `queue_pair_number`. pulumi-alicloud 4.0.0 takes one only on
`ecs.Instance`: for its primary interface and for ONE secondary interface inline (`network_interfaces` is a single
object); `ecs.EcsNetworkInterface` has no such input. A node therefore carries at most two ERIs: the primary on
network card 0 and the secondary on card 1 where the type has two cards (two ERIs on different cards reach the
full bandwidth, on one card less: Alibaba ECS docs, ebmgn7ex).
"""

from __future__ import annotations

from dataclasses import dataclass

HIGH_PERFORMANCE = "HighPerformance"
"""network_interface_traffic_mode of an ERI (the other value, Standard, is a plain ENI)."""
MAX_ERIS = 2
"""The primary interface and one inline secondary: the interfaces ecs.Instance gives a queue-pair number."""


@dataclass(frozen=True)
class EriSlot:
    network_card_index: int
    primary: bool
    """The instance's primary interface (else its one inline secondary)."""
    queue_pairs: int


def eri_layout(network_cards: int, interfaces: int, queue_pairs: int) -> list[EriSlot]:
    """The primary interface on card 0, then the secondary on the next card (card 0 again on a one-card type)."""
    if not 0 <= interfaces <= MAX_ERIS:
        raise ValueError(f"{interfaces} ERIs: pulumi-alicloud gives queue pairs to at most {MAX_ERIS} per instance "
                         "(the primary interface and one inline secondary)")
    if interfaces and queue_pairs < 1:
        raise ValueError("an ERI needs an explicit queue-pair number (catalog node_layout.csv queue_pairs)")
    return [EriSlot(i if i < network_cards else 0, i == 0, queue_pairs) for i in range(interfaces)]

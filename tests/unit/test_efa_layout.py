"""AWS's interface rules for EFA launch templates, on the pure layout function."""

import pytest

from goldenenv.clouds.aws.efa import EFA_ONLY, PRIMARY, interface_layout


@pytest.mark.parametrize(("cards", "efa"), [(1, 0), (1, 1), (4, 4), (32, 32), (16, 16), (8, 4)])
def test_one_primary_ena_then_one_efa_only_per_card(cards, efa):
    slots = interface_layout(cards, efa)
    assert slots[0].interface_type == PRIMARY
    assert (slots[0].network_card_index, slots[0].device_index) == (0, 0)
    efa_slots = [s for s in slots if s.interface_type == EFA_ONLY]
    assert len(efa_slots) == efa and len(slots) == efa + 1
    assert len({(s.network_card_index, s.device_index) for s in slots}) == len(slots)
    assert all(s.device_index == (1 if s.network_card_index == 0 else 0) for s in efa_slots)


def test_more_efa_than_cards_is_refused():
    with pytest.raises(ValueError, match="do not fit 4 network cards"):
        interface_layout(4, 5)

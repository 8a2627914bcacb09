"""The fabric registry and the cloud registry: one entry per fabric, one folder per cloud."""

from __future__ import annotations

import pytest

from goldenenv import catalog, clouds, fabrics
from goldenenv.render import source


@pytest.mark.parametrize("name", sorted(fabrics.FABRICS))
def test_every_fabric_has_its_image_layer_env_and_floors(name):
    fabric = fabrics.get(name)
    assert fabric.cloud in clouds.names()
    assert source(fabric.image_layer).is_file()
    assert fabric.env() == catalog.fabric_env(name) and fabric.env()
    assert fabric.min_nccl("*") or fabric.min_nccl("p5.48xlarge")


def test_fabric_anchors_from_public_tables():
    # eRDMA needs NCCL >= 2.19 (Alibaba PAI eRDMA doc); EFA on p5 >= 2.18.5 (awsome-distributed-training)
    assert fabrics.get("erdma").min_nccl("*")[0]["min_nccl"] == "2.19"
    assert fabrics.get("efa").min_nccl("p5.48xlarge")[0]["min_nccl"] == "2.18.5"
    assert fabrics.get("erdma").env()["NCCL_IB_HCA"] == "erdma"
    assert fabrics.get("none") is None and fabrics.label("efa") == "EFA"


def test_every_cloud_folder_is_a_registered_cloud():
    assert {"aws", "alicloud", "local"} <= set(clouds.names())
    for name in clouds.names():
        assert clouds.get(name).name == name

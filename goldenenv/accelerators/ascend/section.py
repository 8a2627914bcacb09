"""The lock's `ascend:` section: the pins of an image for Huawei Ascend NPUs.

CANN (with HCCL, its collective library, inside it) comes from the base image, which Huawei publishes per CANN
release and chip (ascendhub/cann:<cann>-<chip>-<os>-py<python>); torch and Python are the lock's own top-level
pins, torch_npu is pinned here and installed by hash in the torch layer. The NPU driver and firmware are the host's
(they are not in the image): a lock for Huawei's managed servers names the pair Huawei's table gives its CANN, so
the solver can refuse a node with another.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from goldenenv.spec import Model

CannVersion = Annotated[str, Field(pattern=r"^\d+\.\d+\.(\d+|RC\d+)$",
                                   description="a CANN release such as 8.2.RC1 or 9.1.0")]
"""A CANN commercial or community release as Ascend writes it: 8.2.RC1, 8.5.0, 9.1.0."""
TorchNpuVersion = Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+(\.post\d+)?$",
                                       description="a torch_npu release such as 2.6.0 or 2.10.0.post4")]
HdkVersion = Annotated[str, Field(pattern=r"^\d+(\.[0-9A-Za-z]+){1,5}$",
                                  description="an NPU driver or firmware version such as 24.1.0.3 or 7.5.0.5.220")]


class Ascend(Model):
    """What an Ascend golden image is built from and for."""

    cann: CannVersion
    """The CANN release in the base image (toolkit, operators, HCCL): torch_npu is built for one."""
    torch_npu: TorchNpuVersion
    """torch_npu, Ascend's PyTorch adapter; it requires exactly one torch (catalog ascend_torch_npu)."""
    chip: str = Field(default="910b", pattern=r"^[0-9a-z]+$", description="the NPU SoC family such as 910b")
    """The SoC family the CANN base image is built for (the chip in Huawei's image tags)."""
    platform: Literal["linux/arm64", "linux/amd64"] = "linux/arm64"
    """The image's platform: Huawei's Snt9B servers are aarch64 (Kunpeng), so every wheel must be an arm64 one."""
    driver: HdkVersion | None = None
    """The NPU driver (HDK) of the nodes this image is for, when a vendor's table pairs it with `cann`
    (catalog ascend_driver); unset: no table pairs them and the host's driver is not checked against the lock."""
    firmware: HdkVersion | None = None
    """The NPU firmware that goes with `driver` in the same table."""

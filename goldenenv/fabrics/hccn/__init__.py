"""HCCN, the RoCE network of Huawei's Ascend NPUs: on an Atlas 800T A2 class server (a ModelArts Snt9B Lite Server)
each NPU carries its own RoCE port, which the NPU driver's hccn_tool configures (/usr/local/Ascend/driver/tools/
hccn_tool: its device IP, link, health: https://www.hiascend.com/document/detail/en/mindcluster/730/toolbox/
toolboxug/toolboxug_0142.html) and over which HCCL, CANN's collective library, runs between servers. The NICs are
not the host's: no verbs library, kernel module or device node of the host carries the traffic, so nothing is
installed in the golden image for them (HCCL ships in CANN, in the lock's base; the driver and hccn_tool are mounted
from the host by the accelerator family, goldenenv/accelerators/ascend).

What this folder gives: the lock section (`hccn: {}`: nothing to pin, the versions are the driver's and CANN's, which
the ascend section pins), the image layer (templates/image/layer-hccn.j2: says why it adds nothing), the boot check
(templates/node/hccn-check.sh.j2: every NPU's port reports `link status: UP` before the golden container starts),
HCCL's environment (catalog/fabric_env.csv), and the node health judge's rule (health.py: a node with a port down is
drained, catalog/health_thresholds.csv). Huawei's cloud folder lays the ports out (instance_types.csv
rdma_interfaces: one per NPU).
"""

from __future__ import annotations

from goldenenv.fabrics.model import Fabric
from goldenenv.spec import Model

__all__ = ["HCCN_HOST_IMAGE", "Hccn"]
"""What goldenenv.fabrics offers under its own name."""

ORDER = 8
"""Where HCCN is listed among the fabrics (lock sections, messages): the order they were added."""

HCCN_HOST_IMAGE = ("a Huawei Lite Server image for the Snt9B flavor (ListDevServerImages), which carries the NPU "
                   "driver and its hccn_tool")
HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
"""Where the driver installs hccn_tool (Ascend's MindCluster toolbox guide, above; verified)."""


class Hccn(Model):
    """Nothing to pin: HCCL is CANN's (the lock's ascend.cann) and the RoCE ports are driven by the NPU driver
    (ascend.driver). The section exists so that a lock says which fabric it was built for, as every fabric's does."""


FABRIC = Fabric(
    "hccn", "HCCN RoCE", "huawei", "image/layer-hccn.j2", "hccn", Hccn, ("goldenenv-hccn.service", "hccn-check.sh"),
    host_image_hint=HCCN_HOST_IMAGE)

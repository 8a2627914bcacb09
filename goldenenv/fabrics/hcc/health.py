"""How the node health judge checks HCC RDMA: the evidence an HCC node shows (rdma's links) and the rule it is judged
by (the catalog's hcc_bonds_below_expected). An HCC node's RDMA NICs are Mellanox bonds that Tencent's rdma-agent sets
up (`rdma link show`: "link mlx5_bond_0/1 state ACTIVE physical_state LINK_UP netdev bond0"); the expected count is
instance_types.csv rdma_interfaces.

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.health.judge loads this file by discovery
(from goldenenv/fabrics/hcc/, or bundled into the golden image's goldenenv-health) and hands `judge` itself as `core`,
for its readers of command output.
"""

ORDER = 4
"""Where the judge lists HCC RDMA among its fabrics: the order their judges were added."""

__all__ = []
"""What the judge offers under its own name: nothing of HCC's."""

EVIDENCE = {
    "hcc_links": {"file": "rdma_link.txt", "argv": ("rdma", "link", "show"), "timeout_s": 5, "level": "quick",
                  "required": True},
}
"""The commands an HCC node runs for the judge (goldenenv.health.judge.Evidence's fields but `applies`)."""
LOOPBACK = None
"""No loopback run for HCC RDMA."""


def judge(j, core):
    """Findings on the ACTIVE RDMA bond devices, added to the node's judgement `j`."""
    core.judge_active_rdma_links(j, "hcc_links", "mlx5_bond", "hcc_bonds_below_expected", "HCC RDMA",
                                 "RDMA bond devices")

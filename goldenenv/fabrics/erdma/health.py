"""How the node health judge checks eRDMA: the evidence an eRDMA node shows (rdma's links) and the rule it is judged
by (the catalog's erdma_devices_below_expected).

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.health.judge loads this file by discovery
(from goldenenv/fabrics/erdma/, or bundled into the golden image's goldenenv-health) and hands `judge` itself as
`core`, for its readers of command output.
"""

ORDER = 3
"""Where the judge lists eRDMA among its fabrics: the order their judges were added."""

__all__ = []
"""What the judge offers under its own name: nothing of eRDMA's."""

EVIDENCE = {
    "erdma_links": {"file": "rdma_link.txt", "argv": ("rdma", "link", "show"), "timeout_s": 5, "level": "quick",
                    "required": True},
}
"""The commands an eRDMA node runs for the judge (goldenenv.health.judge.Evidence's fields but `applies`)."""
LOOPBACK = None
"""No loopback run for eRDMA."""


def judge(j, core):
    """Findings on the ACTIVE eRDMA devices, added to the node's judgement `j`."""
    core.judge_active_rdma_links(j, "erdma_links", "erdma", "erdma_devices_below_expected", "eRDMA", "eRDMA devices")

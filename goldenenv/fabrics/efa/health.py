"""How the node health judge checks EFA: the evidence an EFA node shows (fi_info's devices, rdma's counters, a
loopback run) and the rules it is judged by (the catalog's efa_* thresholds).

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.health.judge loads this file by discovery
(from goldenenv/fabrics/efa/, or bundled into the golden image's goldenenv-health) and hands `judge` itself as
`core`, for its readers of command output.
"""

ORDER = 1
"""Where the judge lists EFA among its fabrics: the order their judges were added."""

EFA_FI_INFO = "/opt/amazon/efa/bin/fi_info"
"""Where the EFA installer puts libfabric's fi_info (its /opt/amazon/efa prefix), off the image's PATH."""
EFA_COUNTER_CHECKS = {"efa_rx_drops": "rx_drops", "efa_retrans_timeout_events": "retrans_timeout_events"}
"""Threshold rows judged on `rdma -p statistic show` counters, by the counter each reads."""
_LOOPBACK = ("fi_pingpong -p efa -I 100 >/dev/null 2>&1 & server=$!; sleep 1; "
             "fi_pingpong -p efa -I 100 localhost; status=$?; kill $server 2>/dev/null; exit $status")

__all__ = ["EFA_COUNTER_CHECKS", "EFA_FI_INFO"]
"""What the judge offers under its own name."""

EVIDENCE = {
    "efa_devices": {"file": "fi_info_efa.txt", "argv": ("fi_info", "-p", "efa"), "timeout_s": 10, "level": "quick",
                    "required": True, "fallback": (EFA_FI_INFO, "-p", "efa")},
    "efa_counters": {"file": "rdma_statistic.txt", "argv": ("rdma", "-p", "statistic", "show"), "timeout_s": 5,
                     "level": "quick", "required": True},
    "efa_loopback": {"file": "efa_loopback.txt", "argv": ("sh", "-c", _LOOPBACK), "timeout_s": 120,
                     "level": "medium", "required": False},
}
"""The commands an EFA node runs for the judge (goldenenv.health.judge.Evidence's fields but `applies`)."""
LOOPBACK = "efa_loopback"
"""The evidence whose failed run is the judge's fabric_loopback_failed."""


def judge(j, core):
    """Findings on EFA's devices and counters, added to the node's judgement `j`."""
    text = j.text("efa_devices")
    if text is not None:
        devices, problems = core.parse_fi_info(text)
        j.unreadable("efa_devices", problems)
        expected = j.expect["fabric_devices"]
        if core.readable(devices, problems) and j.exceeds("efa_devices_below_expected", expected - len(devices)):
            j.add("efa_devices_below_expected", "EFA", f"fi_info -p efa lists {len(devices)} EFA devices",
                  f"{expected} EFA devices")
    counters_text = j.text("efa_counters")
    if counters_text is not None:
        links, problems = core.parse_rdma_statistic(counters_text)
        j.unreadable("efa_counters", problems)
        for link, counters in sorted(links.items()):
            for check, counter in EFA_COUNTER_CHECKS.items():
                if counter in counters and j.exceeds(check, counters[counter]):
                    j.add(check, link, f"EFA link {link} counts {counters[counter]} {counter}",
                          f"at most {j.threshold(check)['limit']}")

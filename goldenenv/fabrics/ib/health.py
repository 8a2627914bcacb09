"""How the node health judge checks InfiniBand: the evidence an InfiniBand node shows (ibstat's ports, a loopback
run) and the rules it is judged by (the catalog's ib_* thresholds).

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.health.judge loads this file by discovery
(from goldenenv/fabrics/ib/, or bundled into the golden image's goldenenv-health) and hands `judge` itself as
`core`, for its readers of command output.
"""

ORDER = 2
"""Where the judge lists InfiniBand among its fabrics: the order their judges were added."""

_LOOPBACK = ("ib_write_bw --report_gbits >/dev/null 2>&1 & server=$!; sleep 1; "
             "ib_write_bw --report_gbits localhost; status=$?; kill $server 2>/dev/null; exit $status")

__all__ = []
"""What the judge offers under its own name: nothing of InfiniBand's."""

EVIDENCE = {
    "ib_ports": {"file": "ibstat.txt", "argv": ("ibstat",), "timeout_s": 5, "level": "quick", "required": True},
    "ib_loopback": {"file": "ib_loopback.txt", "argv": ("sh", "-c", _LOOPBACK), "timeout_s": 120, "level": "medium",
                    "required": False},
}
"""The commands an InfiniBand node runs for the judge (goldenenv.health.judge.Evidence's fields but `applies`)."""
LOOPBACK = "ib_loopback"
"""The evidence whose failed run is the judge's fabric_loopback_failed."""


def judge(j, core):
    """Findings on the InfiniBand ports (state and rate), added to the node's judgement `j`. Ports whose link layer
    is Ethernet (RoCE) are not InfiniBand ports and are not counted."""
    text = j.text("ib_ports")
    if text is None:
        return
    ports, problems = core.parse_ibstat(text)
    j.unreadable("ib_ports", problems)
    ib_ports = [p for p in ports if p.link_layer.lower() in ("", "infiniband")]
    expected, rate = j.expect["fabric_devices"], j.expect.get("fabric_rate_gbps")
    if core.readable(ports, problems) and j.exceeds("ib_devices_below_expected", expected - len(ib_ports)):
        j.add("ib_devices_below_expected", "InfiniBand", f"ibstat lists {len(ib_ports)} InfiniBand ports",
              f"{expected} InfiniBand ports")
    for port in ib_ports:
        device = f"{port.ca} port {port.port}"
        if port.state.lower() != "active" or port.physical_state.lower() != "linkup":
            rate_seen = "?" if port.rate_gbps is None else f"{port.rate_gbps:g}"
            j.add("ib_port_not_active", device, f"InfiniBand {device} is {port.state or '?'}/"
                  f"{port.physical_state or '?'} at rate {rate_seen}", "Active/LinkUp")
        elif rate is not None and port.rate_gbps is not None \
                and j.exceeds("ib_rate_below_expected", rate - port.rate_gbps):
            j.add("ib_rate_below_expected", device, f"InfiniBand {device} runs at {port.rate_gbps:g} Gb/s",
                  f"{rate:g} Gb/s")

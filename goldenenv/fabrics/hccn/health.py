"""How the node health judge checks HCCN RoCE: each NPU's RoCE link as hccn_tool reports it, judged by the
catalog's hccn_links_below_expected (drain: HCCL cannot reach the other servers through a port that is down, and a
job over it hangs until HCCL_CONNECT_TIMEOUT). The expected count is instance_types.csv rdma_interfaces (one port
per NPU).

The evidence is one shell loop over the node's NPUs (/dev/davinci<n>, the accelerator family's device nodes), each
line `npu <n> link status: UP|DOWN` (hccn_tool -i <n> -link -g answers "link status: DOWN" in Ascend's npu-exporter,
code index id 4624736881, and "link status: UP" in Ascend's fault-diagnosis guide, id 56688913900; that the
device's index is hccn_tool's -i on a Lite Server is unverified).

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.health.judge loads this file by discovery
(from goldenenv/fabrics/hccn/, or bundled into the golden image's goldenenv-health) and hands `judge` itself as
`core`.
"""

import re

ORDER = 5
"""Where the judge lists HCCN RoCE among its fabrics: the order their judges were added."""

__all__ = []
"""What the judge offers under its own name: nothing of HCCN's."""

LINKS = ("for d in /dev/davinci[0-9]*; do [ -e \"$d\" ] || continue; n=${d#/dev/davinci}; printf 'npu %s ' \"$n\"; "
         "/usr/local/Ascend/driver/tools/hccn_tool -i \"$n\" -link -g 2>&1 | head -n 1 || echo 'no answer'; done")
EVIDENCE = {
    "hccn_links": {"file": "hccn_link.txt", "argv": ("sh", "-c", LINKS), "timeout_s": 20, "level": "quick",
                   "required": True},
}
"""The commands an HCCN node runs for the judge (goldenenv.health.judge.Evidence's fields but `applies`)."""
LOOPBACK = None
"""No loopback run for HCCN RoCE."""
LINE = re.compile(r"^npu (\d+) (.*)$")
STATUS = re.compile(r"^link status:\s*(\S+)")


def parse_links(text):
    """({NPU index: its link status, or what hccn_tool said instead}, lines that are not `npu <n> ...`)."""
    links, problems = {}, []
    for line in text.splitlines():
        if not line.strip():
            continue
        found = LINE.match(line.strip())
        if not found:
            problems.append(f"not an NPU line: {line.strip()!r}")
            continue
        status = STATUS.match(found.group(2).strip())
        links[int(found.group(1))] = status.group(1).upper() if status else found.group(2).strip()
    return links, problems


def judge(j, core):
    """A finding when fewer NPU RoCE links are UP than the node's expected fabric_devices."""
    text = j.text("hccn_links")
    if text is None:
        return
    links, problems = parse_links(text)
    j.unreadable("hccn_links", problems)
    up = sorted(n for n, status in links.items() if status == "UP")
    not_up = [f"NPU {n} {status}" for n, status in sorted(links.items()) if status != "UP"]
    expected = j.expect["fabric_devices"]
    if core.readable(links, problems) and j.exceeds("hccn_links_below_expected", expected - len(up)):
        seen = f"hccn_tool reports {len(up)} NPU RoCE links UP"
        j.add("hccn_links_below_expected", "HCCN RoCE",
              seen + (f" (not UP: {', '.join(not_up)})" if not_up else ""), f"{expected} links UP")

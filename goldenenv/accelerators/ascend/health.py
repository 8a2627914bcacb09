"""How the node health judge checks Ascend NPUs: the evidence an NPU node shows (npu-smi's table, and each NPU's
health detail with its error codes) and the rules it is judged by (rows of catalog/health_thresholds.csv beside
this file), as the judge holds NVIDIA GPUs to nvidia-smi's count and the kernel's XIDs.

npu-smi gives each NPU one of five health words (Ascend's npu-smi reference, npusmi_028, docs/research/huawei.md
§4.2): OK, Warning (minor alarm), Alarm (major), Critical (urgent) and UNKNOWN (the device is absent or not
started); DCMI's dcmi_get_device_health gives the same as the codes 0, 1, 2, 3 and 0xFFFFFFFF (hiascend api_024).
The rules are rows npu_health_<word> whose limit is that code, so which words drain a node is catalog data.
`npu-smi info -t health -i <id>` adds the NPU's error codes ("Error Code : NA" when none); a code the catalog has a
row npu_error_<name> for (limit: the code) takes that row's action, any other is reported under
npu_unlisted_error_code, as an XID the catalog lacks is.

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.health.judge loads this file by discovery
(from goldenenv/accelerators/ascend/, or bundled into the golden image's goldenenv-health) and hands `judge` itself
as `core`, for its readers of command output.
"""

import re

ORDER = 2
"""Where the judge lists Ascend among the accelerator families it judges: the order the families were added."""

COUNT = "npus"
"""The node's expectation that holds how many NPUs it has (catalog.health.expectations, from instance_types.csv
gpu_count); the judge runs this family's evidence only on a node that expects some."""

__all__ = []
"""What the judge offers under its own name: nothing of Ascend's."""

HEALTH_LIST = ("sh", "-c", "npu-smi info -l | sed -n 's/^[[:space:]]*NPU ID[[:space:]]*:[[:space:]]*//p' | "
               "while read -r id; do echo \"NPU ID : $id\"; npu-smi info -t health -i \"$id\"; done")
"""Each NPU's health detail, headed by its id: `npu-smi info -l` lists the ids as "NPU ID : <n>" lines (that line's
exact spacing is unverified; the command names are Ascend's, docs/research/huawei.md §4.1)."""

EVIDENCE = {
    "npu_smi_info": {"file": "npu_smi_info.txt", "argv": ("npu-smi", "info"), "timeout_s": 10, "level": "quick",
                     "required": True},
    "npu_smi_health": {"file": "npu_smi_health.txt", "argv": HEALTH_LIST, "timeout_s": 20, "level": "quick",
                       "required": False},
}
"""The commands an NPU node runs for the judge (goldenenv.health.judge.Evidence's fields but `applies`). The health
detail is optional: npu-smi's table already carries each NPU's health word, the detail adds its error codes."""
LOOPBACK = None
"""No loopback run for NPUs (HCCL's all-reduce is the cluster check's, not the node judge's)."""

HEALTH_CODES = {"OK": 0, "Warning": 1, "Alarm": 2, "Critical": 3, "UNKNOWN": 0xFFFFFFFF}
"""npu-smi's health words as DCMI's health codes (0 normal, 1 minor, 2 major, 3 critical, 0xFFFFFFFF absent)."""

_NPU_ROW = re.compile(r"^\|\s*(\d+)\s+([0-9A-Za-z]+)\s*\|\s*([A-Za-z]+)\s*\|", re.MULTILINE)
"""The first of an NPU's two lines in `npu-smi info`: | <NPU id> <name> | <health> | power, temperature ... (the
second starts with the chip id alone, the process table's lines with numbers where the health is)."""
_HEADER = re.compile(r"^\|\s*NPU\s+Name\s*\|\s*Health\s*\|", re.MULTILINE)
_DETAIL_ID = re.compile(r"^\s*NPU ID\s*:\s*(\d+)\s*$", re.MULTILINE)
_DETAIL_FIELD = re.compile(r"^\s*(Health Status|Error Code)\s*:\s*(.*?)\s*$", re.MULTILINE)
_NONE = ("", "NA", "N/A", "NONE")


class Npu(object):
    """One NPU as npu-smi's table lists it."""

    def __init__(self, index, name, health):
        self.index, self.name, self.health = index, name, health

    def __eq__(self, other):
        return isinstance(other, Npu) and (self.index, self.name, self.health) == (other.index, other.name,
                                                                                   other.health)

    def __repr__(self):
        return "Npu({!r}, {!r}, {!r})".format(self.index, self.name, self.health)


def parse_npu_smi_info(text):
    """(NPUs listed, problems) from `npu-smi info`: no table header is a problem; a header with no NPU under it is
    a node with no NPU (the count rule judges it)."""
    found = [Npu(int(i), name, health) for i, name, health in _NPU_ROW.findall(text)]
    if found or _HEADER.search(text):
        return found, []
    return [], ["no `| NPU Name | Health |` table in the output"]


def parse_npu_health(text):
    """({NPU id: (health word, [error codes])}, problems) from the health details, each headed "NPU ID : <n>"."""
    found, problems = {}, []
    heads = list(_DETAIL_ID.finditer(text))
    for at, head in enumerate(heads):
        end = heads[at + 1].start() if at + 1 < len(heads) else len(text)
        fields = dict(_DETAIL_FIELD.findall(text[head.end():end]))
        if "Health Status" not in fields:
            problems.append("NPU {}: no 'Health Status : ...' line".format(head.group(1)))
            continue
        codes = [c for c in re.split(r"[\s,]+", fields.get("Error Code", "")) if c.upper() not in _NONE]
        found[int(head.group(1))] = (fields["Health Status"], codes)
    return found, problems


def _code(text):
    """An error code as a number (npu-smi writes them in hex, with or without 0x); None when it is not one."""
    try:
        return int(text, 16)
    except ValueError:
        return None


def _judge_health(j, npu, word, detail=""):
    code = HEALTH_CODES.get(word, HEALTH_CODES["UNKNOWN"])
    if code == 0:
        return
    rule = j.code_row("npu_health_", code)
    if rule is None:
        raise ValueError("rules: no npu_health_* row for npu-smi health {!r}; write the rules with "
                         "goldenenv.catalog.health.rules_document()".format(word))
    unknown = "" if word in HEALTH_CODES else " (not one of npu-smi's five words: read as UNKNOWN)"
    j.add(rule, "NPU {}".format(npu), "NPU {}{} health is {}{}".format(npu, detail, word, unknown), "OK")


def judge(j, core):
    """Findings on the node's NPUs, added to its judgement `j`: too few listed, any whose health is not OK, any
    reporting an error code."""
    text = j.text("npu_smi_info")
    names = {}
    if text is not None:
        npus, problems = parse_npu_smi_info(text)
        j.unreadable("npu_smi_info", problems)
        expected = j.expect[COUNT]
        if core.readable(npus, problems) and j.exceeds("npu_count_below_expected", expected - len(npus)):
            listed = ", ".join(str(n.index) for n in npus) or "none"
            j.add("npu_count_below_expected", "node", "npu-smi info lists {} NPUs (ids {})".format(len(npus), listed),
                  "{} NPUs".format(expected))
        for npu in npus:
            names[npu.index] = npu.name
            _judge_health(j, npu.index, npu.health, " ({})".format(npu.name))
    detail = j.text("npu_smi_health")
    if detail is None:
        return
    found, problems = parse_npu_health(detail)
    j.unreadable("npu_smi_health", problems)
    for npu, (word, codes) in sorted(found.items()):
        if npu not in names:
            _judge_health(j, npu, word)
        for code in codes:
            rule = j.code_row("npu_error_", _code(code)) if _code(code) is not None else None
            rule = rule or "npu_unlisted_error_code"
            j.add(rule, "NPU {}".format(npu), "NPU {} reports error code {} (health {})".format(npu, code, word),
                  "Error Code NA")

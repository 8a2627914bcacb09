"""Node health facts: the XID table, per-type NVLink facts and the thresholds the node-side judge applies.

data/health_xid.csv; each cloud's health_links.csv; health_thresholds.csv (the shared rules in data/, each
fabric's in goldenenv/fabrics/<fabric>/catalog/), each row sourced. The judge
(goldenenv/health/judge.py) runs on nodes without goldenenv, so these are handed to it as plain data:
`expectations()` for the node's instance type and `rules_document()` for the rules, both JSON-able.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from goldenenv import catalog
from goldenenv.catalog import rows
from goldenenv.health import judge
from goldenenv.health.judge import ACTIONS


@dataclass(frozen=True)
class XidRule:
    xid: int
    name: str
    """NVIDIA's mnemonic, e.g. ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS."""
    nvidia_bucket: str
    """NVIDIA's resolution bucket (immediate action), e.g. RESTART_BM."""
    action: str
    source: str


@dataclass(frozen=True)
class LinkFacts:
    cloud: str
    instance_type: str
    nvlinks_per_gpu: int
    nvswitch: bool
    """An HGX 8-GPU board: NVIDIA Fabric Manager must be active."""
    source: str
    fabric_rate_gbps: int | None = None
    """Each fabric port's rate (InfiniBand NDR: 400), which the judge holds the ports to; None: not checked."""


@dataclass(frozen=True)
class Threshold:
    check: str
    limit: float
    """A value above it triggers the check; for code rows (dcgm_severity_*, xid154_*) the code it matches."""
    unit: str
    action: str
    source: str


def _action(table: str, key: str, action: str) -> str:
    if action not in ACTIONS:
        raise ValueError(f"{table}.csv row {key}: action {action!r} is not one of {', '.join(ACTIONS)}")
    return action


def _number(table: str, key: str, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{table}.csv row {key}: {column} {text!r} is not a number") from None
    return int(value) if value.is_integer() else value


@functools.cache
def xid_rules() -> dict[int, XidRule]:
    """data/health_xid.csv by XID code."""
    table: dict[int, XidRule] = {}
    for r in rows("health_xid"):
        code = int(_number("health_xid", r["xid"], "xid", r["xid"]))
        if code in table:
            raise ValueError(f"health_xid.csv lists XID {code} twice: keep one row per XID")
        table[code] = XidRule(code, r["name"], r["nvidia_bucket"], _action("health_xid", r["xid"], r["action"]),
                              r["source"])
    return table


@functools.cache
def link_facts() -> dict[tuple[str, str], LinkFacts]:
    """data/health_links.csv by (cloud, instance type)."""
    facts = {}
    for r in rows("health_links"):
        key = f"{r['cloud']} {r['instance_type']}"
        if r["nvswitch"] not in ("yes", "no"):
            raise ValueError(f"health_links.csv row {key}: nvswitch {r['nvswitch']!r} must be yes or no")
        links = _number("health_links", key, "nvlinks_per_gpu", r["nvlinks_per_gpu"])
        rate = r.get("fabric_rate_gbps") or ""
        facts[(r["cloud"], r["instance_type"])] = LinkFacts(
            r["cloud"], r["instance_type"], int(links), r["nvswitch"] == "yes", r["source"],
            int(_number("health_links", key, "fabric_rate_gbps", rate)) if rate else None)
    return facts


@functools.cache
def thresholds() -> dict[str, Threshold]:
    """The health rules by check name: data/health_thresholds.csv's, which judge every node, then each fabric's
    (goldenenv/fabrics/<fabric>/catalog/health_thresholds.csv), which its health.py judges its devices by. Two
    fabrics on one NIC may share a rule (a copied fabric's health.py names the same check) if they agree on it: the
    judge looks a rule up by its check alone."""
    table: dict[str, Threshold] = {}
    where: dict[str, str] = {}
    for r in rows("health_thresholds"):
        rule = Threshold(r["check"], _number("health_thresholds", r["check"], "limit", r["limit"]), r["unit"],
                         _action("health_thresholds", r["check"], r["action"]), r["source"])
        owner = f"fabric {r['fabric']}" if r.get("fabric") else "the shared file"
        known = table.setdefault(rule.check, rule)
        where.setdefault(rule.check, owner)
        if (known.limit, known.unit, known.action) != (rule.limit, rule.unit, rule.action):
            raise ValueError(f"health_thresholds.csv rows {rule.check} of {where[rule.check]} and of {owner} differ "
                             "in limit, unit or action: the node judge looks a rule up by its check alone, so keep "
                             "them equal or give one check a name of its own")
    return table


NO_GPU = {"gpus": 0, "fabric": "none", "fabric_devices": 0, "nvlinks_per_gpu": 0, "nvswitch": False}
"""A node with nothing to judge: a local cluster's containers (their GPUs in local_shapes.csv are stand-ins that
compute nothing, offered to Slurm for its accounting only)."""


JUDGED_DEVICES = "nvidia-smi"
"""The device family the node judge (goldenenv.health.judge) reads itself: nvidia-smi and the kernel's XIDs. A node
whose accelerator family's health is another (Ascend's npu-smi) expects no GPUs, so the judge does not drain it for
a missing nvidia-smi; it expects its devices under the count its family's judge names (judge.ACCELERATOR_JUDGES:
Ascend's `npus`), which only such a node carries."""


def pool_expectations(cloud: str, instance_type: str, rdma: bool | None) -> dict:
    """What a healthy node of a pool shows: its type's expectations, without fabric devices when the pool turns
    RDMA off (the interfaces are then not attached); a local container expects nothing."""
    if cloud in catalog.container_clouds():
        return dict(NO_GPU)
    expect = expectations(cloud, instance_type)
    if rdma is False:
        expect.update(fabric="none", fabric_devices=0)
        expect.pop("fabric_rate_gbps", None)
    return expect


def expectations(cloud: str, instance_type: str) -> dict:
    """What a healthy node of this type shows: GPU count, RDMA fabric and device count, NVLinks, NVSwitch.
    KeyError when the catalog lacks the type, or health_links.csv lacks its row."""
    it = catalog.instance_type(cloud, instance_type)
    links = link_facts().get((it.cloud, it.name))
    if links is None:
        raise KeyError(f"health_links.csv has no row for {it.cloud} {it.name}: add its NVLinks per GPU and "
                       "NVSwitch (yes/no) with a source")
    from goldenenv import accelerators, fabrics  # lazily: fabrics and the accelerator families read the catalog

    fabric = fabrics.get(it.rdma)
    judged = fabric.health_fabric if fabric else "none"
    family = accelerators.of_device(it.gpu.name)
    gpus = it.gpu_count if family is None or family.health == JUDGED_DEVICES else 0
    expect = {"gpus": gpus, "fabric": judged,
              "fabric_devices": it.rdma_interfaces if judged != "none" else 0,
              "nvlinks_per_gpu": links.nvlinks_per_gpu, "nvswitch": links.nvswitch}
    if links.fabric_rate_gbps and judged != "none":
        expect["fabric_rate_gbps"] = links.fabric_rate_gbps
    own = judge.ACCELERATOR_JUDGES.get(family.name) if family and family.health != JUDGED_DEVICES else None
    if own is not None:
        expect[own.COUNT] = it.gpu_count
    return expect


def rules_document() -> dict:
    """The XID table and the thresholds as one JSON-able dict, the `--rules` file of the node-side judge."""
    return {
        "xid": {str(rule.xid): {"name": rule.name, "nvidia_bucket": rule.nvidia_bucket, "action": rule.action}
                for rule in xid_rules().values()},
        "thresholds": {t.check: {"limit": t.limit, "unit": t.unit, "action": t.action}
                       for t in thresholds().values()},
    }

"""Benchmark `goldenenv plan` against a bare Pulumi mock program of the same size, and what --strict adds.

Run: .venv/bin/python scripts/bench_plan.py [--stack aws-p5-2node] [--sizes 2,32,256] [--repeats 3]

For each node count, plans the stack (aws-p5-2node by default; gcp-a3mega-2node plans 9 NICs per node) (goldenenv.plan.plan_config) and a bare program
that declares the same number of resources under the SDK's own MockMonitor, waited for the same
way plan.run_program waits (run_pulumi_func + _sync_await), and the same plan with the deploy-readiness rules
(`plan --strict`, which `up` runs). Ratios are computed in this run.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import time
from importlib import metadata
from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.settings import SETTINGS
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from goldenenv import guardrails, plan, stackconfig

STACK = "aws-p5-2node"
# Bare program shape: 1 explicit provider, 1 root component, 4 child components (network, storage,
# pool, budget) like GpuCluster; the nodes are Instances in the pool, the rest Buckets spread over
# the other children. Total = the plan's resource count.
_FIXED = 6


class _BareMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.created = 0

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        self.created += 1
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        return {}


def _bare_program(nodes: int, total: int) -> dict[str, Any]:
    provider = aws.Provider("aws", region="us-east-1")
    root = pulumi.ComponentResource("bench:aws:Cluster", "cluster", None,
                                    pulumi.ResourceOptions(providers={"aws": provider}))
    kids = [pulumi.ComponentResource(f"bench:aws:{k}", k.lower(), None, pulumi.ResourceOptions(parent=root))
            for k in ("Network", "Storage", "Pool", "Budget")]
    pool = kids[2]
    others = [kids[0], kids[1], kids[3]]
    instances = [
        aws.ec2.Instance(f"node-{i}", ami="ami-0123456789abcdef0", instance_type="p5.48xlarge",
                         tags={"goldenenv:stack": "bench", "node": str(i)},
                         opts=pulumi.ResourceOptions(parent=pool))
        for i in range(nodes)
    ]
    buckets = [
        aws.s3.Bucket(f"bucket-{i}", bucket=f"bench-bucket-{i}", tags={"goldenenv:stack": "bench"},
                      opts=pulumi.ResourceOptions(parent=others[i % len(others)]))
        for i in range(total - _FIXED - nodes)
    ]
    return {"nodeIds": [r.id for r in instances], "bucketArns": [b.arn for b in buckets]}


def run_bare(nodes: int, total: int) -> int:
    """The bare program under the SDK's MockMonitor; rpc state reset as plan.run_program does."""
    mocks = _BareMocks()
    monitor = pulumi_mocks.MockMonitor(mocks)
    pulumi_mocks.set_mocks(mocks, project="bench", stack="bench", preview=False, monitor=monitor)
    pulumi.runtime.set_all_config({})
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    outputs: dict[str, Any] = {}

    def run() -> None:
        declared = _bare_program(nodes, total)
        outputs.update(_sync_await(pulumi.Output.from_input(declared).future()) or {})

    _sync_await(run_pulumi_func(run))
    assert len(outputs["nodeIds"]) == nodes
    return mocks.created  # this SDK's MockMonitor passes components to new_resource too


def config_for(base: dict[str, Any], nodes: int) -> dict[str, Any]:
    config = copy.deepcopy(base)
    config["goldenenv:nodes"]["count"] = nodes
    return config


def timed(fn, repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2,32,256", help="comma-separated node counts")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per size (median reported)")
    ap.add_argument("--stack", default=STACK, help="a shipped stack whose first pool grows (default: %(default)s)")
    args = ap.parse_args()
    stack = args.stack
    instance_types = {t for facts in guardrails.provider_facts() for t in facts.instances}
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    base = stackconfig.read_stack_file(plan.stack_file(stack))
    print(f"python {platform.python_version()} ({sys.executable})")
    print(f"pulumi {metadata.version('pulumi')}, pulumi_aws {metadata.version('pulumi_aws')}, "
          f"cpus {os.cpu_count()} (usable {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'})")
    print(f"stack {stack}, repeats {args.repeats}, one untimed warm-up run of each first\n")

    # Warm-up: imports, pydantic/catalog caches, first-call costs out of the timings.
    plan.plan_config(stack, config_for(base, 2))
    run_bare(2, 41)

    header = (f"{'nodes':>6} {'resources':>9} {'plan median s':>13} {'bare median s':>13} {'ratio':>6} "
              f"{'ms/resource':>11} {'strict median s':>15} {'strict/plan':>11}")
    print(header)
    print("-" * len(header))
    for nodes in sizes:
        config = config_for(base, nodes)
        plan_s, result = timed(lambda: plan.plan_config(stack, config), args.repeats)
        count = len(result.resources)
        pools = {r.urn for r in result.resources if r.type.endswith(":GpuNodePool")}
        # the GPU nodes (the Slurm head is an instance too, outside the pools): one instance each (what each cloud's
        # guardrail facts call its instances: a Huawei Lite Server is a dynamic resource), or an Azure scale set of
        # sku.capacity VMs
        node_resources = [r for r in result.resources if r.parent_urn in pools
                          and (r.type in instance_types or r.type.endswith(":VirtualMachineScaleSet"))]
        n_instances = sum(int(r.props["sku"]["capacity"]) if r.type.endswith(":VirtualMachineScaleSet") else 1
                          for r in node_resources)
        assert n_instances == nodes, (n_instances, nodes)
        # the bare program declares as many node resources (instances; one per Azure scale set) and as many in all
        bare_s, bare_count = timed(lambda: run_bare(len(node_resources), count), args.repeats)
        assert bare_count == count, (bare_count, count)
        strict_s, strict = timed(lambda: plan.plan_config(stack, config, strict=True), args.repeats)
        assert not strict.failed, [f.message for f in strict.findings if f.severity.value == "error"]
        print(f"{nodes:>6} {count:>9} {plan_s:>13.3f} {bare_s:>13.3f} {plan_s / bare_s:>6.2f} "
              f"{1000 * plan_s / count:>11.2f} {strict_s:>15.3f} {strict_s / plan_s:>11.2f}", flush=True)


if __name__ == "__main__":
    main()

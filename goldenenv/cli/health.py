"""`goldenenv health`: judge every node of a stack (GPUs, XIDs, row remapping, NVLink, fabric devices, DCGM) by the
catalog's rules, from the nodes now or from evidence saved earlier (`--from DIR`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from goldenenv.cli.common import HOSTS_BY, STACK, cloud_targets, console, errors, fail, say, stack_spec
from goldenenv import clouds
from goldenenv.clouds.base import HostsBy, NodeReach
from goldenenv.spec import ConfigError, Problem

app = typer.Typer()

LEVEL = typer.Option("quick", "--level", help="quick: seconds (GPU count, XIDs since boot, row remapping, NVLink, "
                     "fabric devices, DCGM level 1 where DCGM is installed); medium: adds DCGM level 2 and a fabric "
                     "loopback test (minutes); long: adds DCGM level 3 (a quarter hour).")


@app.command("health")
def health_cmd(
    ctx: typer.Context,
    stack: str = STACK,
    level: str = LEVEL,
    from_dir: Path = typer.Option(None, "--from", help="Judge evidence saved earlier instead of the nodes: one "
                                  "node's files, or one folder per node (each with its expect.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print every node's findings as JSON."),
    hosts: str = typer.Option(None, "--hosts", help="Cloud stacks: the nodes (ssh://user@address,...); default: "
                              "the stack's nodePrivateIps through the Pulumi backend."),
    hosts_by: HostsBy = HOSTS_BY,
    ssh_config: str = typer.Option(None, "--ssh-config", help="Cloud stacks: ssh config reaching the nodes."),
    ssh_user: str = typer.Option(None, "--ssh-user", help="Cloud stacks: login on the nodes; default: the host "
                                 "image's."),
) -> None:
    """Judge every node's health; exit 1 naming the node, the GPU or device and the rule when one fails.

    The evidence of each run is kept under .goldenenv/health/<stack>/<time>/ for a post-mortem (`--from`)."""
    from goldenenv.health import fleet, judge

    if level not in judge.LEVELS:
        errors.print(f"[bold red]--level {escape(level)}[/]: use one of {', '.join(judge.LEVELS)}")
        raise typer.Exit(2)
    try:
        if from_dir is not None:
            given = [flag for flag, value in {"--hosts": hosts, "--hosts-by": hosts_by, "--ssh-config": ssh_config,
                                              "--ssh-user": ssh_user}.items() if value]
            if given:
                errors.print(f"{', '.join(given)}: --from judges saved evidence and reaches no node")
                raise typer.Exit(2)
            named = ctx.get_parameter_source("stack").name != "DEFAULT"
            verdicts = fleet.judge_folder(from_dir, _default_expect(stack) if named else None)
        else:
            verdicts = node_verdicts(stack_spec(stack), level, hosts, hosts_by, ssh_config, ssh_user)
    except fleet.HealthInputError as e:
        errors.print(f"[bold red]{escape(str(e))}[/]", soft_wrap=True)
        raise typer.Exit(2) from None
    except ConfigError as e:
        fail(e)
    _show(verdicts, as_json)
    if any(v.fails for v in verdicts):
        raise typer.Exit(1)


def _default_expect(stack: str) -> dict:
    """What a node of the stack's first pool should have, for saved evidence without an expect.json (only when the
    stack is named with -s: the local default would judge a GPU recording against no GPUs)."""
    from goldenenv.catalog import health

    spec = stack_spec(stack)
    pool = spec.nodes[0]
    return health.pool_expectations(spec.cloud, pool.instance_type, pool.rdma)


def node_verdicts(spec, level: str, hosts=None, hosts_by=None, ssh_config=None, ssh_user=None) -> list:
    """Every node's evidence of `level`, collected into a new saved folder (fleet.saved_folder), then judged."""
    from goldenenv import project
    from goldenenv.catalog import health
    from goldenenv.health import fleet

    if clouds.get(spec.cloud).reaches_nodes_by is NodeReach.DOCKER:
        if hosts or hosts_by or ssh_config or ssh_user:
            errors.print(f"--hosts, --hosts-by, --ssh-config, --ssh-user: for cloud stacks; {spec.stack}'s nodes "
                         "are local containers")
            raise typer.Exit(2)
        from goldenenv.lifecycle import node_health, own_cluster

        cluster = own_cluster(spec)
        if not cluster.node_names():
            raise ConfigError([Problem(f"stack {spec.stack}", "no nodes: run goldenenv up first")])
        say(f"collecting the {level} level on {len(cluster.node_names())} node container(s)")
        return node_health(spec, cluster, level)
    from goldenenv import remote

    targets, _ = cloud_targets(spec, hosts, hosts_by, ssh_user)
    names = [(pool, f"{pool.name}-{i}") for pool in spec.nodes for i in range(pool.count)]
    ssh = remote.Ssh(ssh_config, None)
    reach = {name: fleet.ssh_node(ssh, target) for target, (_, name) in zip(targets, names)}
    expects = {name: health.pool_expectations(spec.cloud, pool.instance_type, pool.rdma) for pool, name in names}
    out = fleet.saved_folder(project.current().root, spec.stack)
    say(f"collecting the {level} level on {len(reach)} node(s) into {out}")
    for node, why in fleet.collect(reach, expects, level, out).items():
        say(f"{node}: not reached: {why}")
    return fleet.judge_folder(out)


def _show(verdicts, as_json: bool) -> None:
    from goldenenv.health import judge

    if as_json:
        console.print_json(json.dumps([judge.report(v.findings, v.node) for v in verdicts]))
        return
    for v in verdicts:
        mark = "[red]fail[/]" if v.fails else ("[yellow]notice[/]" if v.findings else "[green]healthy[/]")
        console.print(f"{escape(v.node)}: {mark}")
        for f in v.findings:
            console.print(f"  {escape(f.action):<11} {escape(f.rule):<28} {escape(f.device)}: {escape(f.message)}",
                          highlight=False, soft_wrap=True)
    failing = [v.node for v in verdicts if v.fails]
    console.print(f"{len(verdicts) - len(failing)} of {len(verdicts)} node(s) healthy"
                  + (f"; failing: {escape(', '.join(failing))}" if failing else ""))


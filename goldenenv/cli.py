"""`goldenenv` command line."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from goldenenv.plan import HOURS_PER_MONTH, STACKS, Plan
from goldenenv.spec import ConfigError

app = typer.Typer(help="Golden environments for GPU training clusters.", no_args_is_help=True, add_completion=False)
console = Console()
errors = Console(stderr=True)


@app.callback()
def _group() -> None:
    """Golden environments for GPU training clusters."""

KEY_PROPS: dict[str, tuple[str, ...]] = {
    "aws:ec2/vpc:Vpc": ("cidrBlock",),
    "aws:ec2/subnet:Subnet": ("cidrBlock", "availabilityZone", "mapPublicIpOnLaunch"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": ("serviceName", "vpcEndpointType"),
    "aws:ec2/placementGroup:PlacementGroup": ("strategy",),
    "aws:ec2/launchTemplate:LaunchTemplate": ("instanceType", "metadataOptions.httpTokens"),
    "aws:ec2/instance:Instance": ("tags.Name",),
    "aws:s3/bucket:Bucket": ("forceDestroy",),
    "aws:s3/bucketVersioning:BucketVersioning": ("versioningConfiguration.status",),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("deploymentType", "storageCapacity", "perUnitStorageThroughput"),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": ("dataRepositoryPath", "fileSystemPath"),
    "aws:budgets/budget:Budget": ("limitAmount", "limitUnit", "costFilters"),
    "aws:budgets/budgetAction:BudgetAction": ("actionThreshold.actionThresholdValue", "definition.ssmActionDefinition.actionSubType"),
}


def _fail(e: ConfigError) -> None:
    errors.print("[bold red]invalid stack configuration[/]")
    for p in e.problems:
        key, _, message = str(p).partition(": ")
        errors.print(f"  [red]{escape(key)}[/]: {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@app.command("plan")
def plan_cmd(
    stack: str = typer.Option(..., "--stack", "-s", help="Stack name: stacks/Pulumi.<stack>.yaml"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable plan on stdout."),
    stacks_dir: Path = typer.Option(STACKS, "--stacks-dir", help="Folder of stack files."),
) -> None:
    """Evaluate a stack offline (no credentials): resources, cost, guardrail findings."""
    from goldenenv.plan import plan

    try:
        result = plan(stack, stacks_dir)
    except ConfigError as e:
        _fail(e)
    if as_json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        show_plan(result)
    raise typer.Exit(1 if result.failed else 0)


def show_plan(p: Plan) -> None:
    console.print(f"[bold]goldenenv plan[/] stack [cyan]{p.stack}[/] · {p.spec.cloud} {p.spec.region} · "
                  f"{len([r for r in p.resources if r.custom])} resources")
    console.print(_tree(p))
    console.print(_cost_table(p))
    if p.outputs.get("hostfile"):
        console.print("[bold]hostfile[/] (placeholder addresses until up)")
        console.print(p.outputs["hostfile"].rstrip(), highlight=False)
    if p.findings:
        console.print("[bold]findings[/]")
        for f in p.findings:
            colour = "red" if f.severity.value == "error" else "yellow"
            where = f" [dim]{f.urn.rsplit('::', 1)[-1]}[/]" if f.urn else ""
            console.print(f"  [{colour}]{f.severity.value}[/] {f.rule}{where}: {f.message}", highlight=False)
    verdict = "[bold red]guardrails failed[/]" if p.failed else "[bold green]no guardrail failed[/]"
    console.print(verdict)


def _tree(p: Plan) -> Tree:
    root = Tree(f"[bold]{p.stack}[/]")
    nodes = {}
    for r in p.resources:
        label = f"{r.name} [dim]{r.type}[/]{_describe(r)}"
        parent = nodes.get(r.parent_urn, root)
        nodes[r.urn] = parent.add(label)
    return root


def _describe(r) -> str:
    parts = []
    for path in KEY_PROPS.get(r.type, ()):
        value = r.props
        for step in path.split("."):
            value = value.get(step) if isinstance(value, dict) else None
        if value not in (None, "", []):
            parts.append(f"{path.rsplit('.', 1)[-1]}={value}")
    if r.type == "aws:ec2/launchTemplate:LaunchTemplate":
        kinds = [ni.get("interfaceType") for ni in r.props.get("networkInterfaces", [])]
        parts.append(f"efa={kinds.count('efa-only')} ena={kinds.count('interface')}")
    if r.retain_on_delete:
        parts.append("retained on destroy")
    return (" · " + ", ".join(parts)) if parts else ""


def _cost_table(p: Plan) -> Table:
    table = Table(title="cost (catalog prices)", title_justify="left")
    for col in ("pool", "instance type", "nodes", "capacity", "$/hour", "price from"):
        table.add_column(col)
    for c in p.costs:
        table.add_row(
            c.pool, c.instance_type, str(c.count), c.capacity,
            f"{c.usd_per_hour:,.2f}" if c.usd_per_hour is not None else "unknown",
            f"{c.price.region} {c.price.as_of}" if c.price else "-",
        )
    monthly = p.usd_per_hour * HOURS_PER_MONTH
    budget = p.spec.budget
    table.caption = (f"total ${p.usd_per_hour:,.2f}/hour · ${monthly:,.0f}/month at full use"
                     + (f" · budget ${budget.monthly_limit:,.0f}/month" + (" with hard stop" if budget.hard_stop else "")
                        if budget else " · no budget"))
    return table


if __name__ == "__main__":
    app()

"""Stack lifecycle commands, top-level in `goldenenv`: init, plan, up, preview, destroy, run, validate, drill, flow."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from goldenenv import costs, guardrails, project
from goldenenv.cli.common import (ALLOW_OVER_BUDGET, CA_CERT, HOSTS_BY, INDEX_URL, STACK, WHEELHOUSE, cloud_line,
                                  cloud_targets, console, errors, examples, fail, lifecycle_failure, options,
                                  print_line, say, stack_spec)
from goldenenv.clouds.base import HostsBy
from goldenenv.plan import HOURS_PER_MONTH, Plan, host_layer_line
from goldenenv.spec import ConfigError, Problem

app = typer.Typer()


@app.command("init")
def init_cmd(folder: Path = typer.Argument(..., help="New or empty folder for the project.")) -> None:
    """Start a project: Pulumi.yaml, a local stack, an AWS and an Alibaba example stack, the cpu-dev lock."""
    try:
        written = project.init(folder)
    except project.NotEmpty as e:
        errors.print(f"[bold red]not created[/]: {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from None
    root = folder.expanduser()
    for path in written:
        console.print(f"  [green]wrote[/] {escape(str(path.relative_to(root)))}", highlight=False)
    console.print(f"[bold]project {escape(project.project_name(root))}[/] in {escape(str(root))}: "
                  f"cd {escape(str(folder))} && goldenenv plan -s local, then goldenenv flow (Docker) "
                  "or goldenenv plan -s aws-g5-dev", highlight=False, soft_wrap=True)


@app.command("plan")
def plan_cmd(
    stack: str = typer.Option(..., "--stack", "-s", help="Stack name: stacks/Pulumi.<stack>.yaml"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable plan on stdout."),
    stacks_dir: Path = typer.Option(None, "--stacks-dir", help="Folder of stack files (default: the project's "
                                    "stackConfigDir)."),
    strict: bool = typer.Option(False, "--strict", help="Also the deploy-readiness rules up runs: provider limits "
                                "and behaviour the offline mocks cannot see."),
    allow_over_budget: bool = ALLOW_OVER_BUDGET,
) -> None:
    """Evaluate a stack offline (no credentials): resources, cost, guardrail findings."""
    from goldenenv import updates
    from goldenenv.plan import plan, stack_file

    prior, note = updates.last_deployment(stack)
    try:
        result = plan(stack, stacks_dir, strict=strict, prior=prior, prior_note=note,
                      allow_over_budget=allow_over_budget)
    except ConfigError as e:
        fail(e, stack_file(stack, stacks_dir))
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
    if p.spec.run is not None and p.spec.run.estimate:  # the stack sizes a run: its offers, NVIDIA and Ascend
        from goldenenv.cli.estimate import print_stack_families

        print_stack_families(p.spec, p.stack)
    if p.outputs.get("hostfile"):
        console.print("[bold]hostfile[/] (placeholder addresses until up)")
        console.print(p.outputs["hostfile"].rstrip(), highlight=False)
    for pool, rate in p.fabrics:
        console.print(f"[bold]fabric[/] {escape(pool)} ({rate.instance_type}): {rate.describe()} between nodes for "
                      "NCCL", highlight=False)
    for c in p.compat:
        verdict = "[green]fits[/]" if c.ok else "[red]refused[/]"
        support = f", {c.driver_level} driver support" if c.driver_level else ""
        console.print(f"[bold]lock[/] {c.lock} on {c.pool_key} ({c.instance_type}, {escape(c.host.label)}{support}): "
                      f"{verdict}", highlight=False)
        if c.layer:
            console.print(f"  {escape(host_layer_line(c.layer))}", highlight=False)
    if p.outputs.get("imageRef"):
        console.print(f"[bold]golden image[/] {p.outputs['imageRef']}", highlight=False)
    if p.cold_start:
        _show_cold_start(p.cold_start)
    if not _self_provisioned(p.spec):
        for note in p.update_notes:
            console.print(f"[bold]nodes[/]: {escape(note)}", highlight=False)
        for c in p.node_changes:
            colour = "red" if c.action == "replace" else "dim"
            console.print(f"  [{colour}]{c.action}[/] {c.node}: {escape(c.reason)}", highlight=False)
    _show_destroy(p)
    if p.findings:
        console.print("[bold]findings[/]")
        for f in p.findings:
            colour = "red" if f.severity.value == "error" else "yellow"
            where = f" [dim]{f.urn.rsplit('::', 1)[-1]}[/]" if f.urn else ""
            console.print(f"  [{colour}]{f.severity.value}[/] {f.rule}{where}: {f.message}", highlight=False)
    verdict = "[bold red]guardrails failed[/]" if p.failed else "[bold green]no guardrail failed[/]"
    console.print(verdict)


def _show_destroy(p: Plan) -> None:
    from goldenenv import clouds
    from goldenenv.plan import physical_name

    cloud = clouds.get(p.spec.cloud)

    if not p.resources:
        return
    for step in p.destroy_steps:
        console.print(f"[bold]destroy first[/]: {escape(step)}", highlight=False)
    kept = [f"{r.type.rsplit(':', 1)[-1]} {physical_name(r)}" for r in p.kept_on_destroy
            if r.type.rsplit(":", 1)[-1] in cloud.store_kinds]
    deleted = p.deleted_on_destroy
    named = [f"{deleted[kind]} {kind} ({why})" for kind, why in cloud.data_bearing.items() if kind in deleted]
    others = sum(n for kind, n in deleted.items() if kind not in cloud.data_bearing)
    placeholder = cloud.placeholder_account
    account = (f" ({placeholder} stands for your account until up)"
               if placeholder and any(placeholder in k for k in kept) else "")
    console.print(f"[bold]destroy keeps[/] {escape(', '.join(kept) or 'nothing')}{account}: the next up adopts them, "
                  f"--purge-data deletes them. [bold]It deletes[/] {escape(', '.join(named + [f'{others} other resources']))}",
                  highlight=False)
    exempt = [f"{r.type.rsplit(':', 1)[-1]} {physical_name(r)} ({what})" for r, what in p.holding_no_data]
    if exempt:
        console.print(f"[bold]not retained, by their own flag[/] ({guardrails.HOLDS_TAG}): {escape(', '.join(exempt))}",
                      highlight=False)


def _show_cold_start(cold) -> None:
    terms = " + ".join(f"{t.name} {t.seconds:.0f} s" for t in cold.terms)
    total = f"{'at least ' if cold.missing else ''}{cold.seconds / 60:.1f} min"
    dominant = f"; {cold.dominant.name} dominates" if cold.dominant and not cold.missing else ""
    target = ""
    if cold.target_seconds is not None:
        verdict = {True: "within", False: "over", None: "not yet judged against"}[cold.meets_target]
        target = f"; {verdict} the {cold.target_seconds / 60:g}-minute target"
    console.print(f"[bold]cold start[/] (modelled, running → torchrun-ready): {terms} = {total}{dominant}{target}",
                  highlight=False)
    for t in cold.terms:
        console.print(f"  {t.name}: {escape(t.how)}", highlight=False)
    for m in cold.missing:
        console.print(f"  [yellow]not counted[/]: {escape(m)}", highlight=False)


def _tree(p: Plan) -> Tree:
    from goldenenv import clouds

    cloud = clouds.get(p.spec.cloud)
    root = Tree(f"[bold]{p.stack}[/]")
    nodes = {}
    for r in p.resources:
        label = f"{r.name} [dim]{r.type}[/]{_describe(r, cloud)}"
        parent = nodes.get(r.parent_urn, root)
        nodes[r.urn] = parent.add(label)
    return root


def _describe(r, cloud) -> str:
    """The words the stack's cloud has for a planned resource (key properties, RDMA interfaces ...)."""
    parts = list(cloud.describe(r))
    if r.retain_on_delete:
        parts.append("retained on destroy")
    return (" · " + ", ".join(parts)) if parts else ""


def _cost_table(p: Plan) -> Table:
    """Every cost line (compute per pool, storage, network, idle time), how it was computed and its price's date."""
    from goldenenv.plan import money

    currency = p.currency
    table = Table(title="cost (catalog prices)", title_justify="left")
    for col in ("line", "amount", "per", "how", "price from"):
        table.add_column(col, overflow="fold")
    for line in p.lines:
        amount = _amount(line.amount)
        unverified = "" if line.verified else " [yellow](unverified)[/]"
        table.add_row(escape(line.name), amount, f"{line.currency}/{line.per}", escape(line.basis),
                      escape(_price_date(line.source)) + unverified)
    monthly = p.usd_per_hour * HOURS_PER_MONTH
    budget = p.spec.budget
    run = (f" · run ({p.spec.run.hours:g} h) {money(p.run_cost or 0.0, currency, 2)}" if p.spec.run else "")
    total = (f"total {money(p.usd_per_hour, currency, 2)}/hour · {money(monthly, currency)}/month at full use"
             if not p.unpriced else f"total unknown: no price for {', '.join(p.unpriced)} in {p.spec.region} "
             "(see the findings: how to give one)"
             + (f"; the priced lines {money(p.usd_per_hour, currency, 2)}/hour" if p.usd_per_hour else ""))
    dearest = p.dearest_fallback
    fallback = (f" · the cost gate judges the dearest place up may take: {dearest.said(p.spec)}, "
                f"{money(costs.total(dearest.lines, 'hour'), currency, 2)}/hour" if dearest else "")
    table.caption = (total + run
                     + (f" · budget {money(budget.monthly_limit, budget.currency)}/month"
                        + (" with hard stop" if budget.hard_stop else "") if budget else " · no budget") + fallback)
    return table


def _amount(amount: float | None) -> str:
    """Two decimals, or four significant digits for the small lines (a NAT gateway's 0.045/hour)."""
    if amount is None:
        return "not counted"
    return f"{amount:,.2f}" if amount >= 1 or amount == 0 else f"{amount:.4g}"


def _price_date(source: str) -> str:
    """The region and date a line's price is from (the tail of its source), else its source."""
    tail = source.rsplit(" (", 1)[-1].rstrip(")") if source.endswith(")") and " (" in source else source
    return tail


def _self_provisioned(spec) -> bool:
    """Whether goldenenv provisions the stack's cloud itself (the local cloud) rather than through Pulumi."""
    from goldenenv import clouds

    return not clouds.get(spec.cloud).uses_pulumi



@app.command("up")
def up_cmd(stack: str = STACK, ca_cert: str = CA_CERT, pip_index_url: str = INDEX_URL, wheelhouse: str = WHEELHOUSE,
           roll_nodes: str = typer.Option(None, "--roll-nodes", help="Replace these nodes onto their pool's current "
                                          "boot template or script (erases their local NVMe): all, pool names or "
                                          "nodes (gpu-0), comma separated. Without it a boot change reaches no "
                                          "running node."),
           all_at_once: bool = typer.Option(False, "--all-at-once", help="Roll the nodes in one up (e.g. a stopped "
                                            "cluster) instead of one node at a time."),
           allow_over_budget: bool = ALLOW_OVER_BUDGET) -> None:
    """Create the stack: local node containers, or the cloud stack through Pulumi."""
    from goldenenv import automation, lifecycle

    spec = stack_spec(stack)
    try:
        if _self_provisioned(spec):
            if roll_nodes:
                errors.print("--roll-nodes is for cloud stacks: local nodes are recreated from the image on every up")
                raise typer.Exit(2)
            outputs = lifecycle.up(spec, options(ca_cert, pip_index_url, None, wheelhouse), log=say)
        else:
            requested = [n.strip() for n in roll_nodes.split(",") if n.strip()] if roll_nodes is not None else None
            outputs = automation.up(spec, log=cloud_line, roll_nodes=requested, one_at_a_time=not all_at_once,
                                    allow_over_budget=allow_over_budget)
    except (automation.LifecycleError, ConfigError) as e:
        lifecycle_failure(e)
    console.print_json(json.dumps(outputs, default=str))
    if spec.scheduler == "slurm" and not _self_provisioned(spec):
        # the team travels over ssh, never in the head's boot script (a changed one replaces the head)
        errors.print(f"next: goldenenv team apply -s {spec.stack} (with --ssh-config or --head to reach the head): "
                     "the team's users, shares and GPU-hour limits and the budget's GPU-minute limit reach the "
                     "head's Slurm; until then jobs run as the image's user with no limit", highlight=False,
                     soft_wrap=True)


@app.command("preview")
def preview_cmd(stack: str = STACK) -> None:
    """Pulumi preview of a cloud stack (needs the CLI and credentials; `plan` needs neither)."""
    from goldenenv import automation

    spec = stack_spec(stack)
    if _self_provisioned(spec):
        errors.print("the local cloud has no Pulumi preview: goldenenv plan -s local shows what up creates")
        raise typer.Exit(2)
    try:
        automation.preview(spec, log=lambda line: console.print(line, end="", highlight=False))
    except automation.LifecycleError as e:
        lifecycle_failure(e)


@app.command("destroy")
def destroy_cmd(stack: str = STACK, purge_data: bool = typer.Option(
        False, "--purge-data", help="Also delete the stack's datasets and checkpoints (bucket / data volume) and its "
        "image repository."),
        skip_export: bool = typer.Option(False, "--skip-export", help="Destroy the parallel file system without "
                                         "exporting it to the bucket first (files not yet exported are lost)."),
        drop_accounting: bool = typer.Option(False, "--drop-accounting", help="Slurm stacks: destroy without "
                                             "exporting the accounting history (jobs, GPU-hours, costs) from the "
                                             "head first; it is lost."),
        head: str = typer.Option(None, "--head", help="Slurm cloud stacks: the head node to export the accounting "
                                 "history from (ssh://user@address); default: the stack output headPrivateIp "
                                 "(headInstanceId with --hosts-by instance-id)."),
        ssh_config: str = typer.Option(None, "--ssh-config", help="Slurm cloud stacks: ssh config reaching the head "
                                       "(bastion or SSM ProxyCommand, IdentityFile)."),
        ssh_user: str = typer.Option(None, "--ssh-user", help="Slurm cloud stacks: login on the head; default: the "
                                     "cloud's."),
        hosts_by: HostsBy = HOSTS_BY) -> None:
    """Tear the stack down (exporting the Slurm accounting history and the parallel file system first); data survives
    unless --purge-data."""
    from goldenenv import automation, lifecycle

    spec = stack_spec(stack)
    try:
        if _self_provisioned(spec):
            given = [name for name, value in {"--head": head, "--ssh-config": ssh_config, "--ssh-user": ssh_user,
                                              "--hosts-by": hosts_by}.items() if value]
            if given:
                errors.print(f"{', '.join(given)}: for cloud stacks; {spec.stack}'s head is a local container")
                raise typer.Exit(2)
            removed = lifecycle.destroy(spec, purge_data, log=say, drop_accounting=drop_accounting)
            kept = "" if purge_data else f"; kept data volume goldenenv-{spec.stack}-data"
            console.print(f"destroyed {spec.stack}: {len(removed)} removed{kept}")
        else:
            automation.destroy(spec, purge_data, log=cloud_line, skip_export=skip_export,
                               head=_root_head(spec, head, ssh_config, ssh_user, hosts_by),
                               drop_accounting=drop_accounting)
    except (automation.LifecycleError, ConfigError) as e:
        lifecycle_failure(e)


def _root_head(spec, head: str | None, ssh_config: str | None, ssh_user: str | None, hosts_by: HostsBy | None):
    """How destroy reaches the head's golden container as root (its database is root's), from the stack outputs
    destroy reads: a function of them giving the head's client, or None when they name no head."""
    from goldenenv import clouds, jobs
    from goldenenv.clouds import access

    by = hosts_by or HostsBy.PRIVATE_IP

    def reach(outputs: dict):
        cloud = clouds.get(spec.cloud)
        host = head or cloud.head_host(spec, outputs, access.login_name(cloud.node_login(spec, None), ssh_user), by)
        if not host:
            return None
        return jobs.cloud_head(spec, host, ssh_config, None, ssh_user, by,
                               jobs.container_exec(spec, head=True, user="root"))

    return reach


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_cmd(ctx: typer.Context, stack: str = STACK, code: Path = typer.Option(
        None, "--code", help="Copy this folder to the shared storage first: /data/code locally; on a cloud stack "
        "<parallel FS>/code once (e.g. /fsx/code), else <local NVMe>/code on every node."),
        hosts: str = typer.Option(None, "--hosts", help="Cloud stacks: the nodes (ssh://user@address[:port],...); "
                                  "default: the stack's nodePrivateIps and launchEnv through the Pulumi backend."),
        ssh_config: str = typer.Option(None, "--ssh-config", help="Cloud stacks: ssh config reaching the nodes "
                                       "(bastion or SSM ProxyCommand, IdentityFile)."),
        ssh_user: str = typer.Option(None, "--ssh-user", help="Cloud stacks: login on the nodes; default: the "
                                     "cloud's (ubuntu on AWS, root on Alibaba Cloud; yours by OS Login or Entra ID "
                                     "on Google Cloud and Azure without a key; README: Logging in)."),
        hosts_by: HostsBy = HOSTS_BY,
        exec_prefix: str = typer.Option(None, "--exec-prefix", help="Cloud stacks: how to reach the golden image on "
                                        "a node ('' when torch is on the host itself); default: docker exec --user "
                                        "<the image's user> goldenenv, through sudo -n where the login is outside "
                                        "the docker group."),
        nproc_per_node: int = typer.Option(None, "--nproc-per-node", min=1, help="Cloud stacks: processes per node; "
                                           "default: the launchEnv's NPROC_PER_NODE (the instance type's GPUs)."),
        resume: bool = typer.Option(False, "--resume", help="Cloud stacks: tell the ranks (GOLDENENV_RESUME=1) to "
                                    "resume; examples/train_ddp.py always resumes from the latest checkpoint in "
                                    "its --checkpoint-dir ($GOLDENENV_CHECKPOINTS).")) -> None:
    """Run CMD on every node under torchrun (c10d rendezvous): goldenenv run -- python /data/code/train.py

    On a cloud stack over ssh, in every node's golden container: goldenenv run -s aws-p5-2node --ssh-config
    ~/.ssh/goldenenv --code examples -- python /fsx/code/train_ddp.py"""
    from goldenenv import automation, jobs, lifecycle, remote

    command = list(ctx.args)
    if not command:
        errors.print("give the command after --, e.g. goldenenv run -s local --code examples -- "
                     "python /data/code/train_ddp.py")
        raise typer.Exit(2)
    spec = stack_spec(stack)
    cloud_only = {"--hosts": hosts, "--hosts-by": hosts_by, "--ssh-config": ssh_config, "--ssh-user": ssh_user,
                  "--resume": resume, "--nproc-per-node": nproc_per_node}
    try:
        if _self_provisioned(spec):
            given = [name for name, value in cloud_only.items() if value]
            if given:
                errors.print(f"{', '.join(given)}: for cloud stacks; {spec.stack} runs on local node containers")
                raise typer.Exit(2)
            result = lifecycle.run(spec, command, print_line, code)
            failure = result.first_failure and (f"a rank failed on {result.first_failure}; stopped the run on "
                                                "every node. ")
            summary = (failure or "") + "exit codes: " + ", ".join(
                f"{n} {c}" for n, c in sorted(result.exit_codes.items()) if c)
        else:
            targets, outputs = cloud_targets(spec, hosts, hosts_by, ssh_user)
            exec_prefix = jobs.container_exec(spec) if exec_prefix is None else exec_prefix
            result = lifecycle.run_remote(spec, command, print_line, targets, outputs, ssh_config, exec_prefix,
                                          code, resume, ssh_user, nproc_per_node, log=say)
            summary = result.describe_failure()
    except (ConfigError, automation.LifecycleError, remote.RemoteError, ValueError) as e:
        lifecycle_failure(e)
    if not result.ok:
        errors.print(f"[bold red]{escape(summary)}[/]")
        raise typer.Exit(1)
    console.print(f"[green]done on {len(result.exit_codes)} nodes[/]")


@app.command("validate")
def validate_cmd(
    stack: str = STACK,
    hosts: str = typer.Option(None, "--hosts", help="Cloud nodes as testinfra hosts (ssh://ubuntu@10.0.0.5,...); "
                              "default: the stack's nodePrivateIps through the Pulumi backend."),
    ssh_config: str = typer.Option(None, "--ssh-config", help="ssh config reaching the nodes (bastion or SSM ProxyCommand)."),
    ssh_user: str = typer.Option(None, "--ssh-user", help="Login on the nodes; default: the cloud's (ubuntu on "
                                 "AWS, root on Alibaba Cloud; yours by OS Login or Entra ID on Google Cloud and "
                                 "Azure without a key; README: Logging in)."),
    hosts_by: HostsBy = HOSTS_BY,
    exec_prefix: str = typer.Option(None, "--exec-prefix", help="How to reach the golden image on a node; default: "
                                    "docker exec --user <the image's user> goldenenv, through sudo -n where the "
                                    "login is outside the docker group."),
    min_fraction: float = typer.Option(0.8, "--min-fraction", help="Fail below this fraction of the catalog's busbw."),
    head: str = typer.Option(None, "--head", help="Slurm cloud stacks: the head node (ssh://user@address); default: "
                             "the stack output headPrivateIp (headInstanceId with --hosts-by instance-id)."),
) -> None:
    """Image checks on every node, cross-node drift, and an all-reduce across the nodes (busbw vs catalog on GPUs).

    On clouds, every node's driver is also compared with the one its pinned host image carries, and every node's
    host with its pool's host layer (engine, toolkit, modules, file-system client at the host lock's versions; each
    drifted node is named with what drifted). On Slurm stacks,
    also the scheduler's view: every node registered, idle or busy, with its GPUs as GRES, and none drained."""
    from goldenenv import automation, compat, jobs, lifecycle

    spec = stack_spec(stack)
    try:
        if _self_provisioned(spec):
            if hosts_by:
                errors.print(f"--hosts-by: for cloud stacks; {spec.stack} validates its local node containers")
                raise typer.Exit(2)
            result = lifecycle.validate(spec, log=say)
        else:
            targets, _ = cloud_targets(spec, hosts, hosts_by, ssh_user)
            node_prefix = jobs.container_exec(spec) if exec_prefix is None else exec_prefix
            pool = spec.nodes[0]
            from goldenenv.images import host as hostlayer

            driver = compat.node_driver(hostlayer.layer(spec, pool))  # the image's, or the one the layer installs
            result = lifecycle.validate_hosts(spec.image.lock, targets, node_prefix, ssh_config,
                                              pool.instance_type, spec.cloud, min_fraction, log=say,
                                              host_driver=driver, spec=spec)
            from goldenenv.cli.health import node_verdicts

            say("every node's health (quick level)")
            result.health = node_verdicts(spec, "quick", hosts, hosts_by, ssh_config, ssh_user)
            if spec.scheduler == "slurm":
                say("the scheduler's view, from the head")
                client = jobs.cloud_head(spec, head, ssh_config, None, ssh_user, hosts_by or HostsBy.PRIVATE_IP,
                                         exec_prefix)
                result.scheduler, result.scheduler_problems = jobs.scheduler_check(spec, client)
    except (ConfigError, automation.LifecycleError, jobs.HeadError) as e:
        lifecycle_failure(e)
    _show_validation(result)
    if not result.ok:
        raise typer.Exit(1)


def _show_validation(result) -> None:
    summary = result.image_checks.strip().splitlines()[-1] if result.image_checks.strip() else "no output"
    console.print(f"image checks: {'[green]pass[/]' if result.image_ok else '[red]fail[/]'} ({escape(summary.strip('= '))})")
    if not result.image_ok:
        console.print(result.image_checks, markup=False, highlight=False)
    console.print("drift: " + ("[green]none[/]" if not result.drift else "[red]" + escape("; ".join(result.drift)) + "[/]"))
    if result.host_checks:
        console.print("host layer: " + ("[green]as locked on every node[/]" if not result.host_drift else "[red]drift[/]"))
        for node, lines in result.host_drift.items():
            for line in lines:
                console.print(f"  {escape(node)}: {escape(line)}", style="red", highlight=False)
    console.print(f"all-reduce: {'[green]pass[/]' if result.allreduce_ok else '[red]fail[/]'} "
                  f"{escape(result.allreduce_note)}")
    if result.health:
        failing = [f"{v.node}: {v.findings[0].rule} {v.findings[0].device}" for v in result.health if v.fails]
        console.print("health: " + ("[green]pass[/]" if not failing else "[red]" + escape("; ".join(failing)) + "[/]")
                      + f" ({len(result.health) - len(failing)} of {len(result.health)} node(s) healthy; "
                      "`goldenenv health` for every finding)")
    if result.scheduler or result.scheduler_problems:
        verdict = "[green]pass[/]" if not result.scheduler_problems else "[red]" + escape(
            "; ".join(result.scheduler_problems)) + "[/]"
        nodes = ", ".join(f"{n.name} {n.state.lower()}" + (f" {n.gres}" if n.gres else "")
                          + (f" ({n.reason})" if n.reason else "") for n in result.scheduler)
        console.print(f"scheduler: {verdict} ({escape(nodes) or 'no nodes registered'})")


@app.command("drill")
def drill_cmd(stack: str = STACK, steps: int = typer.Option(120, "--steps", help="Training steps of the drill's run."),
              interval: int = typer.Option(10, "--checkpoint-every", help="Steps between two checkpoints."),
              gpu_error: bool = typer.Option(False, "--gpu-error", help="Local Slurm stack: instead of killing a "
                                             "node, stage a contained GPU error on one (an XID the catalog says "
                                             "needs a job restart, as recorded evidence) and kill its rank; the "
                                             "job's own script requeues it and it resumes.")) -> None:
    """Spot drill: kill a node mid-training; it comes back and the training resumes from the last checkpoint.

    On a Slurm stack the drill submits the training and only kills: Slurm requeues the job by itself. With
    --gpu-error the node stays: the job restarts itself for the GPU error its node's health check names."""
    from goldenenv import lifecycle

    spec = stack_spec(stack)
    if gpu_error and spec.scheduler != "slurm":
        fail(ConfigError([Problem("--gpu-error", f"stack {stack} runs no Slurm: the error drill needs a queue, "
                                  "since the job's own script restarts it; use a stack with goldenenv:scheduler: "
                                  "slurm (local's default), or drop --gpu-error")]))
    try:
        report = (lifecycle.gpu_error_drill(spec, examples(), steps, interval, log=say) if gpu_error else
                  lifecycle.drill(spec, examples(), steps, interval, log=say))
    except (ConfigError, RuntimeError) as e:
        lifecycle_failure(e)
    _show_drill(report)
    if not report.ok:
        raise typer.Exit(1)


def _show_drill(report) -> None:
    colour = "green" if report.ok else "red"
    if report.staged:
        blow = (f"a rank died at step {report.step_at_kill} on a staged GPU error (the job's script said: "
                f"{report.staged.split(' (xid_')[0]})")
    else:
        blow = f"killed at step {report.step_at_kill}"
    who = "its own script" if report.staged else "Slurm"
    requeue = (f"{who} requeued job {report.job_id} by itself (restarts {report.restarts}), running again "
               f"{report.back_after_s:.0f} s later; " if report.job_id else "")
    console.print(f"[{colour}]drill: {escape(blow)}, last checkpoint {report.checkpoint_before_kill}; {requeue}"
                  f"resumed from {report.resumed_from}, finished at {report.final_step}: lost {report.lost_steps} "
                  f"steps (interval {report.interval})[/]")


@app.command("flow")
def flow_cmd(stack: str = STACK, ca_cert: str = CA_CERT, pip_index_url: str = INDEX_URL, wheelhouse: str = WHEELHOUSE,
             steps: int = typer.Option(120, "--steps", help="Training steps of the run the flow submits or trains."),
             keep: bool = typer.Option(False, "--keep", help="Skip destroy.")) -> None:
    """The whole flow, phase by phase and timed: image (built if needed), up, validate; then, on a stack with Slurm
    (the local default), submit the training to the queue and drill (a node is killed, Slurm requeues the job and it
    resumes from its checkpoint); without a scheduler, train with checkpoints and drill; destroy (data kept)."""
    from goldenenv import flow

    spec = stack_spec(stack)
    try:
        report = flow.run_flow(spec, options(ca_cert, pip_index_url, None, wheelhouse), examples(), steps,
                               destroy_after=not keep, console=console)
    except (ConfigError, RuntimeError) as e:
        lifecycle_failure(e)
    if not report.ok:
        raise typer.Exit(1)

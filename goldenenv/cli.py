"""`goldenenv` command line."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from goldenenv import project
from goldenenv.clouds.base import HOST_OUTPUTS, HostsBy
from goldenenv.plan import HOURS_PER_MONTH, Plan
from goldenenv.spec import ConfigError, Problem

app = typer.Typer(help="Golden environments for GPU training clusters.", no_args_is_help=True, add_completion=False)
console = Console(emoji=False)
errors = Console(stderr=True, emoji=False)


OUTSIDE_A_PROJECT = {"init", "estimate"}
"""Commands that need no project: they create one, or read only goldenenv's catalog."""


@app.callback()
def _group(ctx: typer.Context, cwd: Path = typer.Option(
        None, "--cwd", "-C", help="Run as if started in this folder: the project is the nearest one upward "
        "holding Pulumi.yaml, as for the Pulumi CLI.")) -> None:
    """Golden environments for GPU training clusters."""
    import os

    if cwd is not None:
        if not cwd.is_dir():
            errors.print(f"[bold red]--cwd {escape(str(cwd))}[/]: no such folder")
            raise typer.Exit(2)
        os.chdir(cwd)
    if ctx.invoked_subcommand in OUTSIDE_A_PROJECT:
        return
    try:
        project.use(project.find())
    except project.NoProject as e:
        errors.print(f"[bold red]not in a goldenenv project[/]: {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from None
    except ConfigError as e:
        _fail(e)


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


def _fail(e: ConfigError, source: Path | None = None) -> None:
    errors.print("[bold red]invalid stack configuration[/]" + (f" in {escape(str(source))}" if source else ""),
                 soft_wrap=True)
    for p in e.problems:
        key, _, message = str(p).partition(": ")
        errors.print(f"  [red]{escape(key)}[/]: {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


ALLOW_OVER_BUDGET = typer.Option(False, "--allow-over-budget", help="Go ahead with a run (goldenenv:run) or an "
                                 "hour at full use that the monthly budget cannot pay: a warning, not an error.")


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
        _fail(e, stack_file(stack, stacks_dir))
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
    for c in p.compat:
        verdict = "[green]fits[/]" if c.ok else "[red]refused[/]"
        support = f", {c.driver_level} driver support" if c.driver_level else ""
        console.print(f"[bold]lock[/] {c.lock} on {c.pool_key} ({c.instance_type}, {escape(c.host.label)}{support}): "
                      f"{verdict}", highlight=False)
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
    table.caption = (f"total {money(p.usd_per_hour, currency, 2)}/hour · {money(monthly, currency)}/month at full use"
                     + run
                     + (f" · budget {money(budget.monthly_limit, budget.currency)}/month"
                        + (" with hard stop" if budget.hard_stop else "") if budget else " · no budget"))
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


CA_CERT = typer.Option(None, "--ca-cert", envvar="PIP_CERT", help="Extra CA bundle for pip in builder stages.")
INDEX_URL = typer.Option(None, "--pip-index-url", envvar="PIP_INDEX_URL", help="Package index (may hold credentials).")
APT_MIRROR = typer.Option(None, "--apt-mirror", help="Distribution mirror for the base and OS packages.")
WHEELHOUSE = typer.Option(None, "--wheelhouse", envvar="PIP_FIND_LINKS", help="Folder of local wheels (e.g. CPU torch).")
DEFAULT_STACK = "local"
STACK = typer.Option(DEFAULT_STACK, "--stack", "-s", help="Stack name (stacks/Pulumi.<stack>.yaml); local by default.")


def _examples() -> Path:
    """The project's examples/, else the packaged ones: the training the drill and the flow run."""
    return project.current().examples_folder()


def _options(ca_cert, pip_index_url, apt_mirror, wheelhouse):
    from goldenenv.images.dockerfile import BuildOptions

    folder = Path(wheelhouse) if wheelhouse and Path(wheelhouse).is_dir() else None
    return BuildOptions(Path(ca_cert) if ca_cert else None, pip_index_url, apt_mirror, folder)


def _spec(stack: str):
    from goldenenv.lifecycle import load_spec
    from goldenenv.plan import stack_file

    try:
        return load_spec(stack)
    except ConfigError as e:
        _fail(e, stack_file(stack))


def _self_provisioned(spec) -> bool:
    """Whether goldenenv provisions the stack's cloud itself (the local cloud) rather than through Pulumi."""
    from goldenenv import clouds

    return not clouds.get(spec.cloud).uses_pulumi


def _say(message: str) -> None:
    console.print(f"[dim]·[/] {escape(message)}", highlight=False)


def _print_line(node: str, text: str) -> None:
    console.print(f"[cyan]\\[{node}][/] {escape(text)}", highlight=False, soft_wrap=True)


def _cloud_line(line: str) -> None:
    """Pulumi's own output arrives with its line ends; goldenenv's steps without."""
    console.print(escape(line), end="" if line.endswith("\n") else "\n", highlight=False)


def _lifecycle_failure(e: Exception) -> None:
    errors.print(f"[bold red]{escape(str(e))}[/]")
    raise typer.Exit(1)


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

    spec = _spec(stack)
    try:
        if _self_provisioned(spec):
            if roll_nodes:
                errors.print("--roll-nodes is for cloud stacks: local nodes are recreated from the image on every up")
                raise typer.Exit(2)
            outputs = lifecycle.up(spec, _options(ca_cert, pip_index_url, None, wheelhouse), log=_say)
        else:
            requested = [n.strip() for n in roll_nodes.split(",") if n.strip()] if roll_nodes is not None else None
            outputs = automation.up(spec, log=_cloud_line, roll_nodes=requested, one_at_a_time=not all_at_once,
                                    allow_over_budget=allow_over_budget)
    except (automation.LifecycleError, ConfigError) as e:
        _lifecycle_failure(e)
    console.print_json(json.dumps(outputs, default=str))


@app.command("preview")
def preview_cmd(stack: str = STACK) -> None:
    """Pulumi preview of a cloud stack (needs the CLI and credentials; `plan` needs neither)."""
    from goldenenv import automation

    spec = _spec(stack)
    if _self_provisioned(spec):
        errors.print("the local cloud has no Pulumi preview: goldenenv plan -s local shows what up creates")
        raise typer.Exit(2)
    try:
        automation.preview(spec, log=lambda line: console.print(line, end="", highlight=False))
    except automation.LifecycleError as e:
        _lifecycle_failure(e)


@app.command("destroy")
def destroy_cmd(stack: str = STACK, purge_data: bool = typer.Option(
        False, "--purge-data", help="Also delete the stack's datasets and checkpoints (bucket / data volume) and its "
        "image repository."),
        skip_export: bool = typer.Option(False, "--skip-export", help="Destroy the parallel file system without "
                                         "exporting it to the bucket first (files not yet exported are lost).")) -> None:
    """Tear the stack down (exporting the parallel file system first); data survives unless --purge-data."""
    from goldenenv import automation, lifecycle

    spec = _spec(stack)
    try:
        if _self_provisioned(spec):
            removed = lifecycle.destroy(spec, purge_data, log=_say)
            kept = "" if purge_data else f"; kept data volume goldenenv-{spec.stack}-data"
            console.print(f"destroyed {spec.stack}: {len(removed)} removed{kept}")
        else:
            automation.destroy(spec, purge_data, log=_cloud_line, skip_export=skip_export)
    except (automation.LifecycleError, ConfigError) as e:
        _lifecycle_failure(e)


HOSTS_BY = typer.Option(
    None, "--hosts-by", case_sensitive=False, help="Cloud stacks: address the nodes by their private IPs (the stack's "
    "nodePrivateIps; the default: from the VPC, a VPN or adminCidrs) or by instance id (instanceIds), for an ssh "
    "config whose ProxyCommand takes one, e.g. on AWS 'Host i-*' with 'ProxyCommand aws ssm start-session --target "
    "%h --document-name AWS-StartSSHSession --parameters portNumber=%p'.")


def _cloud_targets(spec, hosts: str | None, hosts_by: HostsBy | None,
                   ssh_user: str | None) -> tuple[list[str], dict | None]:
    """The nodes validate and run log in to, and the stack outputs when they were read: --hosts as given, else the
    stack's nodes addressed as --hosts-by says (the cloud's node_hosts), as --ssh-user or the host image's login."""
    from goldenenv import automation, clouds

    if hosts and hosts_by:
        errors.print("--hosts names the nodes itself, --hosts-by picks them from the stack outputs: give one")
        raise typer.Exit(2)
    if hosts:
        return [h.strip() for h in hosts.split(",") if h.strip()], None
    if not any(pool.ssh_public_key for pool in spec.nodes):
        _say("no pool sets nodes.sshPublicKey, so the nodes took no SSH key from goldenenv: ssh logs in only with "
             "a key the host image brings (plan says how else to reach them)")
    cloud = clouds.get(spec.cloud)
    by = hosts_by or HostsBy.PRIVATE_IP
    outputs = automation.outputs(spec)
    targets = cloud.node_hosts(spec, outputs, ssh_user or cloud.ssh_user, by)
    if not targets:
        raise ConfigError([Problem(f"stack {spec.stack}", f"no nodes in the stack output {HOST_OUTPUTS[by]}: "
                                   "goldenenv up first, or name them with --hosts ssh://user@address,...")])
    return targets, outputs


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_cmd(ctx: typer.Context, stack: str = STACK, code: Path = typer.Option(
        None, "--code", help="Copy this folder to the shared storage first: /data/code locally; on a cloud stack "
        "<parallel FS>/code once (e.g. /fsx/code), else <local NVMe>/code on every node."),
        hosts: str = typer.Option(None, "--hosts", help="Cloud stacks: the nodes (ssh://user@address[:port],...); "
                                  "default: the stack's nodePrivateIps and launchEnv through the Pulumi backend."),
        ssh_config: str = typer.Option(None, "--ssh-config", help="Cloud stacks: ssh config reaching the nodes "
                                       "(bastion or SSM ProxyCommand, IdentityFile)."),
        ssh_user: str = typer.Option(None, "--ssh-user", help="Cloud stacks: login on the nodes; default: the host "
                                     "image's (ubuntu on AWS, root on Alibaba Cloud)."),
        hosts_by: HostsBy = HOSTS_BY,
        exec_prefix: str = typer.Option("docker exec goldenenv", "--exec-prefix", help="Cloud stacks: how to reach "
                                        "the golden image on a node ('' when torch is on the host itself)."),
        nproc_per_node: int = typer.Option(None, "--nproc-per-node", min=1, help="Cloud stacks: processes per node; "
                                           "default: the launchEnv's NPROC_PER_NODE (the instance type's GPUs)."),
        resume: bool = typer.Option(False, "--resume", help="Cloud stacks: tell the ranks (GOLDENENV_RESUME=1) to "
                                    "resume; examples/train_ddp.py always resumes from the latest checkpoint in "
                                    "its --checkpoint-dir ($GOLDENENV_CHECKPOINTS).")) -> None:
    """Run CMD on every node under torchrun (c10d rendezvous): goldenenv run -- python /data/code/train.py

    On a cloud stack over ssh, in every node's golden container: goldenenv run -s aws-p5-2node --ssh-config
    ~/.ssh/goldenenv --code examples -- python /fsx/code/train_ddp.py"""
    from goldenenv import automation, lifecycle, remote

    command = list(ctx.args)
    if not command:
        errors.print("give the command after --, e.g. goldenenv run -s local --code examples -- "
                     "python /data/code/train_ddp.py")
        raise typer.Exit(2)
    spec = _spec(stack)
    cloud_only = {"--hosts": hosts, "--hosts-by": hosts_by, "--ssh-config": ssh_config, "--ssh-user": ssh_user,
                  "--resume": resume, "--nproc-per-node": nproc_per_node}
    try:
        if _self_provisioned(spec):
            given = [name for name, value in cloud_only.items() if value]
            if given:
                errors.print(f"{', '.join(given)}: for cloud stacks; {spec.stack} runs on local node containers")
                raise typer.Exit(2)
            result = lifecycle.run(spec, command, _print_line, code)
            failure = result.first_failure and (f"a rank failed on {result.first_failure}; stopped the run on "
                                                "every node. ")
            summary = (failure or "") + "exit codes: " + ", ".join(
                f"{n} {c}" for n, c in sorted(result.exit_codes.items()) if c)
        else:
            targets, outputs = _cloud_targets(spec, hosts, hosts_by, ssh_user)
            result = lifecycle.run_remote(spec, command, _print_line, targets, outputs, ssh_config, exec_prefix,
                                          code, resume, ssh_user, nproc_per_node, log=_say)
            summary = result.describe_failure()
    except (ConfigError, automation.LifecycleError, remote.RemoteError, ValueError) as e:
        _lifecycle_failure(e)
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
    ssh_user: str = typer.Option(None, "--ssh-user", help="Login on the nodes; default: the host image's "
                                 "(ubuntu on AWS, root on Alibaba Cloud)."),
    hosts_by: HostsBy = HOSTS_BY,
    exec_prefix: str = typer.Option("docker exec goldenenv", "--exec-prefix", help="How to reach the golden image on a node."),
    min_fraction: float = typer.Option(0.8, "--min-fraction", help="Fail below this fraction of the catalog's busbw."),
) -> None:
    """Image checks on every node, cross-node drift, and an all-reduce across the nodes (busbw vs catalog on GPUs).

    On clouds, every node's driver is also compared with the one its pinned host image carries."""
    from goldenenv import automation, compat, lifecycle

    spec = _spec(stack)
    try:
        if _self_provisioned(spec):
            if hosts_by:
                errors.print(f"--hosts-by: for cloud stacks; {spec.stack} validates its local node containers")
                raise typer.Exit(2)
            result = lifecycle.validate(spec, log=_say)
        else:
            targets, _ = _cloud_targets(spec, hosts, hosts_by, ssh_user)
            pool = spec.nodes[0]
            host = compat.node_host(spec.cloud, spec.region, pool.host_image)
            result = lifecycle.validate_hosts(spec.image.lock, targets, exec_prefix, ssh_config,
                                              pool.instance_type, spec.cloud, min_fraction, log=_say,
                                              host_driver=host.driver)
    except (ConfigError, automation.LifecycleError) as e:
        _lifecycle_failure(e)
    _show_validation(result)
    if not result.ok:
        raise typer.Exit(1)


def _show_validation(result) -> None:
    summary = result.image_checks.strip().splitlines()[-1] if result.image_checks.strip() else "no output"
    console.print(f"image checks: {'[green]pass[/]' if result.image_ok else '[red]fail[/]'} ({escape(summary.strip('= '))})")
    if not result.image_ok:
        console.print(result.image_checks, markup=False, highlight=False)
    console.print("drift: " + ("[green]none[/]" if not result.drift else "[red]" + escape("; ".join(result.drift)) + "[/]"))
    console.print(f"all-reduce: {'[green]pass[/]' if result.allreduce_ok else '[red]fail[/]'} "
                  f"{escape(result.allreduce_note)}")


@app.command("drill")
def drill_cmd(stack: str = STACK, steps: int = typer.Option(120, "--steps"),
              interval: int = typer.Option(10, "--checkpoint-every")) -> None:
    """Spot drill: kill a node mid-training, bring it back, resume from the last checkpoint."""
    from goldenenv import lifecycle

    spec = _spec(stack)
    try:
        report = lifecycle.drill(spec, _examples(), steps, interval, log=_say)
    except (ConfigError, RuntimeError) as e:
        _lifecycle_failure(e)
    _show_drill(report)
    if not report.ok:
        raise typer.Exit(1)


def _show_drill(report) -> None:
    colour = "green" if report.ok else "red"
    console.print(f"[{colour}]drill: killed at step {report.step_at_kill}, last checkpoint {report.checkpoint_before_kill}, "
                  f"resumed from {report.resumed_from}, finished at {report.final_step}: lost {report.lost_steps} "
                  f"steps (interval {report.interval})[/]")


@app.command("flow")
def flow_cmd(stack: str = STACK, ca_cert: str = CA_CERT, pip_index_url: str = INDEX_URL, wheelhouse: str = WHEELHOUSE,
             steps: int = typer.Option(120, "--steps"), keep: bool = typer.Option(False, "--keep", help="Skip destroy.")) -> None:
    """The whole local flow: build the image if needed, up, validate, train with checkpoints, drill, destroy."""
    from goldenenv import flow

    spec = _spec(stack)
    try:
        report = flow.run_flow(spec, _options(ca_cert, pip_index_url, None, wheelhouse), _examples(), steps,
                               destroy_after=not keep, console=console)
    except (ConfigError, RuntimeError) as e:
        _lifecycle_failure(e)
    if not report.ok:
        raise typer.Exit(1)


image_app = typer.Typer(help="Golden images: one lock → compatibility check → Dockerfile → build → checks.",
                        no_args_is_help=True)
app.add_typer(image_app, name="image")


def _lock(name: str):
    from goldenenv.images.lock import load

    try:
        return load(name)
    except ConfigError as e:
        _fail(e)


@image_app.command("list")
def image_list() -> None:
    """Every lock under images/, with its pins and whether it is built here."""
    from goldenenv.images.lock import load, names

    built = _local_tags()
    table = Table()
    for col in ("image", "tag", "torch", "cuda", "nccl", "fabric", "built"):
        table.add_column(col)
    for name in names():
        lock = load(name)
        table.add_row(name, lock.tag, lock.torch or "-", lock.cuda or "-", lock.nccl or "-", lock.fabric,
                      "?" if built is None else ("yes" if lock.tag in built else "no"))
    console.print(table)


def _local_tags() -> set[str] | None:
    try:
        import docker

        return {t for image in docker.from_env().images.list() for t in image.tags}
    except Exception:  # noqa: BLE001 - no engine: the column says "?"
        return None


@image_app.command("render")
def image_render(name: str, out: Path = typer.Option(None, "--out", help="Write the whole build context here.")) -> None:
    """Print the Dockerfile the lock renders to (or write the build context)."""
    from goldenenv.images import dockerfile
    from goldenenv.images.base import bootstrap_tag

    lock = _lock(name)
    base_ref = lock.base.image or bootstrap_tag(lock.base.bootstrap)
    if out:
        dockerfile.write_context(lock, base_ref, dockerfile.BuildOptions(), out)
        console.print(f"build context for {lock.tag} in {out}")
    else:
        print(dockerfile.dockerfile(lock, base_ref), end="")


@image_app.command("check-lock")
def image_check_lock(
    name: str,
    instance_type: str = typer.Option(None, "--instance-type", help="Can the lock run on this instance type?"),
    driver: str = typer.Option(None, "--driver", help="... with this NVIDIA driver (e.g. 550.54.15)?"),
    cloud: str = typer.Option("aws", "--cloud"),
    wheelhouse: str = WHEELHOUSE,
) -> None:
    """Compatibility of the lock's pins with each other, the catalog and optionally a node."""
    from goldenenv import compat

    lock = _lock(name)
    folder = Path(wheelhouse) if wheelhouse and Path(wheelhouse).is_dir() else None
    found = (compat.can_run(lock, cloud, instance_type, driver, wheelhouse=folder) if instance_type
             else compat.check_lock(lock, folder))
    for c in found:
        colour = "red" if c.severity == "error" else "yellow"
        console.print(f"[{colour}]{c.severity}[/] {c.rule}: {escape(c.message)}", highlight=False)
    errors_found = [c for c in found if c.severity == "error"]
    where = f" on {instance_type}" + (f" with driver {driver}" if driver else "") if instance_type else ""
    if errors_found:
        console.print(f"[bold red]{name} is refused{where}[/]")
        raise typer.Exit(1)
    minimum = f"; minimum driver {compat.min_driver(lock.cuda)}" if lock.cuda else ""
    console.print(f"[bold green]{name} passes{where}[/] ({lock.tag}{minimum})")


@image_app.command("pin")
def image_pin(name: str, wheelhouse: str = WHEELHOUSE, pip_index_url: str = INDEX_URL) -> None:
    """Resolve the lock's pins and requirements into hash-pinned packages (rewrites its packages section)."""
    from goldenenv.images import pin
    from goldenenv.images.lock import lock_path

    lock = _lock(name)
    if lock.extends:
        errors.print(f"{name}/lock.yaml: extends: {name} takes its pins from {lock.extends}; "
                     f"run goldenenv image pin {lock.extends}")
        raise typer.Exit(2)
    folder = Path(wheelhouse) if wheelhouse and Path(wheelhouse).is_dir() else None
    with console.status(f"resolving {name} for Python {lock.python}"):
        try:
            packages = pin.pin(lock, folder, pip_index_url)
        except RuntimeError as e:
            errors.print(f"[red]{escape(str(e))}[/]")
            raise typer.Exit(1) from None
    pin.write_packages(lock_path(name), packages)
    console.print(f"{name}: {len(packages)} distributions pinned → {_lock(name).tag}")


@image_app.command("build")
def image_build(name: str, ca_cert: str = CA_CERT, pip_index_url: str = INDEX_URL, apt_mirror: str = APT_MIRROR,
                wheelhouse: str = WHEELHOUSE) -> None:
    """Check the lock, bootstrap the base if it cannot be pulled, and build the image."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from goldenenv.images.base import BaseError
    from goldenenv.images.build import BuildError, build

    lock = _lock(name)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[step]}"), console=console) as progress:
        task = progress.add_task(name, total=None, step="base")

        def on_step(n: int, total: int, text: str) -> None:
            progress.update(task, completed=n - 1, total=total, step=text[:60])

        try:
            built = build(lock, _options(ca_cert, pip_index_url, apt_mirror, wheelhouse), on_step=on_step,
                          log=lambda m: progress.update(task, step=m[:60]))
        except BuildError as e:
            progress.stop()
            errors.print(f"[bold red]{escape(str(e))}[/]")
            if e.log:
                errors.print(escape(e.log.rstrip()[-4000:]), highlight=False)
            raise typer.Exit(1) from None
        except BaseError as e:
            progress.stop()
            errors.print(f"[bold red]{escape(str(e))}[/]")
            raise typer.Exit(1) from None
        except ConfigError as e:
            progress.stop()
            _fail(e)
        progress.update(task, completed=built.steps, total=built.steps, step="done")
    console.print(f"built {built.tag} in {built.seconds:.0f} s ({built.cached_steps}/{built.steps} steps cached)")


@image_app.command("prune")
def image_prune(name: str = typer.Argument(None, help="One image's builder cache; all images when omitted.")) -> None:
    """Free the builder stages kept as layer cache (goldenenv-builder/NAME:STAGE); built images stay."""
    import docker

    from goldenenv.images.build import remove_builders

    removed = remove_builders(docker.from_env(), name)
    console.print(f"removed {len(removed)} builder stages" + (f" of {name}" if name else "")
                  + "; the next build of each starts cold", highlight=False)


@image_app.command("push")
def image_push(
    name: str,
    registry: str = typer.Option(None, "--registry", help="HOST, HOST:PORT or HOST:PORT/PATH: pushes "
                                 "<registry>/<name>:<lock hash>-<image id>."),
    stack: str = typer.Option(None, "--stack", "-s", help="Push to this cloud stack's own repository "
                              "(created first if needed; needs the Pulumi CLI and credentials)."),
) -> None:
    """Push a built image and record its digest in images/<name>/published.yaml, where stacks read it."""
    import docker

    from goldenenv import automation
    from goldenenv.images import publish, size

    lock = _lock(name)
    if bool(registry) == bool(stack):
        errors.print("give exactly one of --registry URL or --stack STACK")
        raise typer.Exit(2)
    auth = None
    try:
        if stack:
            spec = _spec(stack)
            if spec.image.lock != name:
                errors.print(f"stack {stack} runs lock {spec.image.lock}, not {name}")
                raise typer.Exit(2)
            repository = automation.image_repository(spec, log=lambda line: console.print(line, end="", highlight=False))
            registry = repository.rsplit("/", 1)[0]
            auth = automation.registry_auth(spec, registry)
        engine = docker.from_env()
        entry = publish.push(lock, registry, engine, auth=auth, log=_say,
                             measure=lambda tag: size.compressed_bytes(engine, tag))
    except (publish.PushError, automation.LifecycleError) as e:
        _lifecycle_failure(e)
    console.print(f"pushed {entry.ref}" + (f" ({entry.compressed_bytes / 1e9:.2f} GB compressed)"
                                           if entry.compressed_bytes else ""), highlight=False)
    console.print(f"recorded in {publish.published_path(name)}: stacks running {name} without image.ref pull it",
                  highlight=False)


@image_app.command("check")
def image_check(
    name: str,
    hosts: str = typer.Option(None, "--hosts", help="Check nodes instead: ssh://user@node,... (testinfra hosts)."),
    exec_prefix: str = typer.Option("", "--exec-prefix", help="On nodes, run probes in the container: 'docker exec goldenenv'."),
    gpu_checks: bool = typer.Option(False, "--gpu", help="Also check driver, GPUs, torch on GPUs and an all-reduce."),
    instance_type: str = typer.Option(None, "--instance-type"),
    cloud: str = typer.Option("aws", "--cloud"),
) -> None:
    """Prove the built image (or live nodes) match the lock: one case per pin."""
    import subprocess

    from goldenenv.checks import run
    from goldenenv.images.lock import lock_path

    lock = _lock(name)
    extra = ["--cloud", cloud] + (["--gpu"] if gpu_checks else []) + (
        ["--instance-type", instance_type] if instance_type else []) + (
        ["--exec-prefix", exec_prefix] if exec_prefix else [])
    if hosts:
        done = subprocess.run(run.pytest_command(lock_path(name), hosts, extra), capture_output=True, text=True)
        result = run.CheckResult(done.returncode == 0, done.stdout + done.stderr)
    else:
        built = _local_tags()
        if built is not None and lock.tag not in built:
            errors.print(f"[red]{lock.tag} is not built here: goldenenv image build {name}[/]")
            raise typer.Exit(1)
        result = run.check_image(lock, extra=extra)
    console.print(result.output.rstrip(), highlight=False, markup=False)
    if not result.passed:
        raise typer.Exit(1)
    console.print(f"[bold green]{lock.tag} matches its lock[/]")

@app.command("estimate")
def estimate_cmd(
    params: str = typer.Option(None, "--params", help="Parameters N, e.g. 13e9 (or --model)."),
    tokens: str = typer.Option(None, "--tokens", help="Training tokens T, e.g. 1e8."),
    method: str = typer.Option(None, "--method", help="full | lora | qlora (default full)."),
    precision: str = typer.Option(None, "--precision", help="bf16 | fp16 | fp32 (default bf16)."),
    zero: str = typer.Option(None, "--zero", help="DeepSpeed ZeRO stage 0..3 (default 0)."),
    offload: bool = typer.Option(None, "--offload", help="Offload the optimizer to CPU (ZeRO 1..3).", show_default=False),
    offload_params: bool = typer.Option(None, "--offload-params", help="Also offload parameters (ZeRO 3).",
                                        show_default=False),
    seq_len: str = typer.Option(None, "--seq-len", help="Sequence length (default 4096)."),
    micro_batch: str = typer.Option(None, "--micro-batch", help="Micro-batch per GPU (default 1)."),
    layers: str = typer.Option(None, "--layers", help="Transformer layers (with --hidden)."),
    hidden: str = typer.Option(None, "--hidden", help="Hidden size (with --layers)."),
    heads: str = typer.Option(None, "--heads", help="Attention heads (default hidden/128)."),
    model: str = typer.Option(None, "--model", help="A known shape: llama-7b, llama-13b, llama-70b."),
    checkpointing: bool = typer.Option(None, "--checkpointing/--no-checkpointing",
                                       help="Full activation checkpointing (default on).", show_default=False),
    gpu: str = typer.Option(None, "--gpu", help="Catalog GPU for the time estimate, e.g. H100-80GB."),
    gpus_per_node: str = typer.Option(None, "--gpus-per-node", help="GPUs per node (default 8)."),
    nodes: str = typer.Option(None, "--nodes", help="Nodes (default 1)."),
    mfu: str = typer.Option(None, "--mfu", help="Model FLOPs utilisation, 0..1 (default 0.4, an assumption)."),
    deadline: str = typer.Option(None, "--deadline", help="Hours the run may take; the cheapest option meets it."),
    trainable_fraction: str = typer.Option(None, "--trainable-fraction", help="LoRA/QLoRA adapters as a fraction "
                                           "of N (default 0.01)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable estimate on stdout."),
    spec: Path = typer.Option(None, "--spec", help="YAML run spec with the same keys (flags win)."),
    plot: Path = typer.Option(None, "--plot", help="Write a PNG or SVG chart of memory and cost."),
) -> None:
    """Memory per GPU, training FLOPs, time and cost on every catalog instance type, before renting."""
    import yaml

    from goldenenv import estimate as est

    given = {k: v for k, v in locals().items() if k in est.SPEC_KEYS}
    problems: list[str] = []
    if spec is not None:
        try:
            loaded = yaml.safe_load(spec.read_text()) or {}
            if not isinstance(loaded, dict):
                raise ValueError("not a mapping of keys to values")
        except (OSError, ValueError, yaml.YAMLError) as e:
            problems.append(f"--spec: {spec} cannot be read: {str(e).splitlines()[0]}")
            loaded = {}
        for key, value in loaded.items():
            name = str(key).replace("-", "_")
            if name not in est.SPEC_KEYS:
                problems.append(f"--spec: unknown key {key!r}; valid: {', '.join(est.SPEC_KEYS)}")
            elif given.get(name) is None:
                given[name] = value
    if plot is not None and plot.suffix.lower() not in (".png", ".svg"):
        problems.append(f"--plot: {plot} must end in .png or .svg")
    request, invalid = est.request_from(given)
    problems += invalid
    if problems:
        errors.print("[bold red]invalid estimate input[/]")
        for p in problems:
            key, _, message = p.partition(": ")
            errors.print(f"  [red]{escape(key)}[/]: {escape(message)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    result = est.estimate(request)
    if plot is not None:
        result_figure = est.figure(result)
        result_figure.savefig(plot, format=plot.suffix.lower().lstrip("."))
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
        return
    gib = est.GiB
    m = result.memory
    shape = request.model_shape
    console.print(f"[bold]goldenenv estimate[/] {request.params:.3g} params · {request.tokens:.3g} tokens · "
                  f"{request.method} {request.precision} · ZeRO-{request.zero}"
                  f"{' offload' if request.offload else ''} · {result.gpus} GPUs ({request.nodes} nodes)", highlight=False)
    console.print(f"shape: {shape.layers} layers, hidden {shape.hidden}, {shape.heads} heads"
                  f"{' (inferred from N, an assumption)' if shape.inferred else ''}; seq {request.seq_len}, "
                  f"micro-batch {request.micro_batch}, checkpointing {'on' if request.checkpointing else 'off'}",
                  highlight=False)
    memory_table = Table(title="memory per GPU", title_justify="left")
    memory_table.add_column("component")
    memory_table.add_column("GiB", justify="right")
    for label, value in (("weights", m.weights), ("gradients", m.gradients), ("optimizer", m.optimizer),
                         ("model states", m.model_states), ("activations", m.activations),
                         ("overhead", m.overhead), ("total", m.total)):
        memory_table.add_row(label, f"{value / gib:,.2f}")
    console.print(memory_table)
    console.print("fits: " + ", ".join(f"{name} {'[green]yes[/]' if ok else '[red]no[/]'}"
                                       for name, ok in result.fits.items()), highlight=False)
    time = (f"{result.hours:,.1f} h on {request.gpu} ({result.gpu_hours:,.0f} GPU-hours)" if result.hours is not None
            else "give --gpu for the time on your own configuration")
    console.print(f"training FLOPs {result.training_flops:.3g} · MFU {result.mfu} · {time}", highlight=False)
    options_table = Table(title="cost per option (smallest fleet that fits" +
                          (f" and finishes within {request.deadline_hours:g} h)" if request.deadline_hours else ")"),
                          title_justify="left")
    for col in ("cloud", "instance type", "GPU", "capacity", "nodes", "hours", "price/hour", "cost"):
        options_table.add_column(col)
    for o in result.options:
        late = " [red]late[/]" if o.meets_deadline is False else ""
        options_table.add_row(
            o.cloud, o.instance_type, o.gpu, o.capacity, str(o.nodes) if o.fits else "[red]does not fit[/]",
            f"{o.hours:,.1f}{late}" if o.hours is not None else "-",
            f"{o.price_per_hour:,.2f} {o.currency}" if o.price_per_hour is not None else "unpriced",
            f"{o.cost:,.0f} {o.currency}" if o.cost is not None else "-")
    console.print(options_table)
    for currency, o in sorted(result.cheapest.items()):
        console.print(f"[bold]cheapest ({currency})[/]: {o.cloud} {o.instance_type} x{o.nodes} {o.capacity}, "
                      f"{o.hours:,.1f} h, {o.cost:,.0f} {currency}", highlight=False)
    if not result.cheapest:
        console.print("[yellow]no priced option fits and meets the deadline[/]")
    for a in est.ASSUMPTIONS:
        console.print(f"[dim]assumption: {escape(a)}[/]", highlight=False)


if __name__ == "__main__":
    app()

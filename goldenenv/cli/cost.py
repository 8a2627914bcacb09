"""`goldenenv cost`: what the stack's jobs cost in a period (Slurm's accounting × each pool's GPU-hour price), by
job, user or month, with the cloud's bill beside it and the lines between the two."""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import datetime, timezone

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from goldenenv.cli.common import HOSTS_BY, STACK, console, errors, stack_spec
from goldenenv.cli.jobs import EXEC_PREFIX, HEAD, SSH_CONFIG, SSH_USER, head_client, reported
from goldenenv.clouds.base import HostsBy

app = typer.Typer()


def _bad(flag: str, message: str) -> None:
    errors.print(f"[bold red]{flag}[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)


def _window(month: str | None, since: str | None, now: datetime):
    from goldenenv import jobcost

    if month and since:
        _bad("--month, --since", "give one: a calendar month, or a day until now")
    try:
        if since:
            return jobcost.since_window(since, now)
        return jobcost.month_window(month or f"{now:%Y-%m}")
    except ValueError as e:
        _bad("--since" if since else "--month", str(e))


@app.command("cost")
def cost_cmd(stack: str = STACK,
             by: str = typer.Option("user", "--by", help="One row per job, user or month."),
             month: str = typer.Option(None, "--month", metavar="YYYY-MM", help="A calendar month (UTC); default: "
                                       "this month."),
             since: str = typer.Option(None, "--since", metavar="YYYY-MM-DD", help="From this day (UTC) until now, "
                                       "instead of a month."),
             as_json: bool = typer.Option(False, "--json", help="One JSON object, for scripts."),
             as_csv: bool = typer.Option(False, "--csv", help="CSV rows and a total row, for a spreadsheet."),
             head: str = HEAD, ssh_config: str = SSH_CONFIG, ssh_user: str = SSH_USER,
             hosts_by: HostsBy = HOSTS_BY, exec_prefix: str = EXEC_PREFIX) -> None:
    """What the jobs cost: each allocation's GPU-seconds (every start of a requeued job, a running job's until now)
    from Slurm's accounting × its pool's GPU-hour price, by job, user or month; the rows re-add to the total.

    Beside it, the cloud's bill for the period where it can be read from here (AWS Cost Explorer by the stack's tag;
    Alibaba, Tencent and Huawei by month with their API keys in the environment), and what lies between the two:
    the nodes' idle and down GPU time (Slurm's sreport), the head, storage and network (plan's lines)."""
    from goldenenv import jobcost, jobs

    if by not in jobcost.BY:
        _bad("--by", f"{by!r}: one of {', '.join(jobcost.BY)}")
    if as_json and as_csv:
        _bad("--json, --csv", "give one")
    now = datetime.now(timezone.utc)
    window = _window(month, since, now)
    spec = stack_spec(stack)
    with reported():
        client, _ = head_client(spec, head, ssh_config, ssh_user, hosts_by, exec_prefix)
        priced = jobs.accounting(client, spec, window, now)
        try:
            used = jobs.utilization(client, spec, window)
        except jobs.HeadError as e:  # the jobs' cost stands without it: the idle line says why it is missing
            used = str(e)
    report = _report(spec, window, priced, by, used, now)
    if as_json:
        print(json.dumps(report, indent=2))
    elif as_csv:
        print(_csv(report), end="")
    else:
        _show(report)


def _report(spec, window, priced, by: str, used, now: datetime) -> dict:
    """Everything the command shows, as numbers: the table, the JSON and the CSV are this one object."""
    from goldenenv import catalog, clouds, costgap, jobcost
    from goldenenv.clouds.base import head_shape
    from goldenenv.gpuprice import pool_gpu_price

    shown = jobcost.rounded(jobcost.rows(priced, by))
    prices = {pool.name: pool_gpu_price(spec, pool) for pool in spec.nodes}
    currency = next((p.currency for p in prices.values() if p), "")
    cloud = clouds.get(spec.cloud)
    bill = clouds.load(spec.cloud, "bill").read(spec, window, os.environ)
    gap = [costgap.idle_line(spec, used)]
    if bill.amount is not None or spec.cloud not in catalog.container_clouds():  # the local stack has no bill
        gap += costgap.stack_lines(spec, window, now, head_shape(spec, cloud))
    unpriced = sorted({p.pool or "(unknown pool)" for p in priced if p.price is None})
    return {
        "stack": spec.stack, "by": by, "currency": currency,
        "period": {"label": window.label, "since": f"{window.since:%Y-%m-%dT%H:%M:%SZ}",
                   "until": f"{window.until:%Y-%m-%dT%H:%M:%SZ}"},
        "prices": [{"pool": name, "per_gpu_hour": p.per_gpu_hour, "currency": p.currency, "basis": p.basis}
                   if p else {"pool": name, "per_gpu_hour": None, "currency": currency, "basis": "no price"}
                   for name, p in prices.items()],
        "rows": [{by: row.key, "user": row.user, "jobs": row.jobs, "gpu_hours": hours, "cost": cost}
                 for row, hours, cost in shown.rows],
        "total": {"jobs": len({p.record.job_id for p in priced}), "gpu_hours": shown.gpu_hours, "cost": shown.cost},
        "unpriced_pools": unpriced,
        "bill": bill.to_dict(),
        "difference": [{"line": g.name, "amount": None if g.amount is None else round(g.amount, 2),
                        "basis": g.basis} for g in gap],
        "unexplained": _rounded(costgap.unexplained(bill.amount, shown.cost, gap)
                                if bill.currency in ("", currency) else None),
    }


def _rounded(amount: float | None) -> float | None:
    return None if amount is None else round(amount, 2)


def _csv(report: dict) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    by = report["by"]
    writer.writerow([by, "user", "jobs", "gpu_hours", f"cost_{report['currency']}"])
    for row in report["rows"]:
        writer.writerow([row[by], row["user"], row["jobs"], row["gpu_hours"], "" if row["cost"] is None else
                         row["cost"]])
    total = report["total"]
    writer.writerow(["total", "", total["jobs"], total["gpu_hours"],
                     "" if total["cost"] is None else total["cost"]])
    return out.getvalue()


def _money(amount: float | None, currency: str) -> str:
    return "not priced" if amount is None else f"{amount:,.2f} {currency}"


def _show(report: dict) -> None:
    by, currency = report["by"], report["currency"]
    console.print(f"GPU cost of jobs on {escape(report['stack'])}, {escape(report['period']['label'])} (UTC)",
                  highlight=False, soft_wrap=True)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, show_footer=True)
    rows = report["rows"]
    table.add_column(by, footer="total")
    if by == "job":
        table.add_column("user")
    table.add_column("jobs", justify="right", footer=str(report["total"]["jobs"]))  # a job of two months: once
    table.add_column("GPU-hours", justify="right", footer=f"{report['total']['gpu_hours']:.3f}")
    table.add_column(f"cost {currency}", justify="right",
                     footer="" if report["total"]["cost"] is None else f"{report['total']['cost']:.2f}")
    for row in rows:
        cells = [escape(str(row[by]))] + ([escape(row["user"])] if by == "job" else [])
        table.add_row(*cells, str(row["jobs"]), f"{row['gpu_hours']:.3f}",
                      "" if row["cost"] is None else f"{row['cost']:.2f}")
    if rows:
        console.print(table)
    else:
        console.print(f"no GPU time used by jobs of {report['stack']} in {report['period']['label']}")
    for price in report["prices"]:
        console.print(f"price, pool {escape(price['pool'])}: " + (
            f"{price['per_gpu_hour']:,.4f} {price['currency']} per GPU-hour, {escape(price['basis'])}"
            if price["per_gpu_hour"] is not None else "none (the catalog cannot price it and no pricePerHour)"),
            highlight=False, soft_wrap=True)
    if report["unpriced_pools"]:
        console.print(f"[yellow]not priced[/]: jobs on {escape(', '.join(report['unpriced_pools']))}",
                      soft_wrap=True)
    bill = report["bill"]
    console.print()
    if bill["amount"] is None:
        console.print(f"bill: {escape(bill['source'])}", highlight=False, soft_wrap=True)
    else:
        console.print(f"bill: {bill['amount']:,.2f} {bill['currency']} for {escape(bill['period'])} "
                      f"({escape(bill['source'])})", highlight=False, soft_wrap=True)
    console.print(f"between the jobs' total and the bill (estimates, {currency}):" if report["bill"]["amount"]
                  is not None or len(report["difference"]) > 1 else "beside the jobs:", highlight=False)
    for line in report["difference"]:
        console.print(f"  {escape(line['line'])}: {_money(line['amount'], currency)} — {escape(line['basis'])}",
                      highlight=False, soft_wrap=True)
    if report["unexplained"] is not None:
        console.print(f"  the rest of the bill: {_money(report['unexplained'], currency)} (discounts and credits "
                      "lower it; taxes, support and usage no line counts raise it)", highlight=False, soft_wrap=True)

"""`goldenenv estimate`: memory, FLOPs, time and cost of a training run before renting (needs no project)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from goldenenv.cli.common import console, errors

app = typer.Typer()


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

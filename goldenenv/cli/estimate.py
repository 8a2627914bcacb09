"""`goldenenv estimate`: memory, FLOPs, time and cost of a training run before renting (needs no project; -s reads
a stack's pool, lock and goldenenv:run)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from goldenenv.cli.common import console, errors

app = typer.Typer()


def _o(flag: str, help_text: str, **kw):
    return typer.Option(None, flag, help=help_text, **kw)


@app.command("estimate")
def estimate_cmd(
    params: str = _o("--params", "Parameters N, e.g. 13e9 (or --model / --config)."),
    tokens: str = _o("--tokens", "Training tokens T, e.g. 1e8."),
    hours: str = _o("--hours", "Instead of --tokens: the run's hours at perfect scaling on your configuration "
                    "(--instance-type or --gpu, with --gpus-per-node and --nodes), where you measured or know "
                    "them; every option's hours are scaled from them by its GPUs × peak TFLOPS."),
    model: str = _o("--model", "A catalog model: llama-2-7b, llama-3.1-8b, mistral-7b, qwen2.5-7b, ..."),
    config: str = _o("--config", "A Hugging Face config.json on disk (read locally, never downloaded)."),
    method: str = _o("--method", "full | lora | qlora (default full)."),
    precision: str = _o("--precision", "bf16 | fp16 | fp32 (default bf16)."),
    zero: str = _o("--zero", "DeepSpeed ZeRO stage 0..3 (default 0)."),
    offload: bool = _o("--offload", "Offload the optimizer to CPU (ZeRO 1..3).", show_default=False),
    offload_params: bool = _o("--offload-params", "Also offload parameters (ZeRO 3).", show_default=False),
    zero_init: bool = _o("--zero-init/--no-zero-init", "ZeRO-3 builds the model partitioned (default on).",
                         show_default=False),
    deepspeed: str = _o("--deepspeed", "DeepSpeed release whose formulas apply, e.g. 0.16.9."),
    lock: str = _o("--lock", "Use this image lock's DeepSpeed pin (default: the newest formulas known)."),
    seq_len: str = _o("--seq-len", "Sequence length (default 4096)."),
    micro_batch: str = _o("--micro-batch", "Micro-batch per GPU (default 1)."),
    grad_accum: str = _o("--grad-accum", "Micro-batches per optimizer step (default 1)."),
    attention: str = _o("--attention", "flash | eager (default flash: no s² term)."),
    layers: str = _o("--layers", "Transformer layers (with --hidden)."),
    hidden: str = _o("--hidden", "Hidden size (with --layers)."),
    heads: str = _o("--heads", "Attention heads (default hidden/128)."),
    kv_heads: str = _o("--kv-heads", "Key/value heads (grouped-query attention; default = heads)."),
    checkpointing: bool = _o("--checkpointing/--no-checkpointing", "Full activation checkpointing (default on).",
                             show_default=False),
    gpu: str = _o("--gpu", "Catalog GPU of your configuration, e.g. H100-80GB."),
    instance_type: str = _o("--instance-type", "Catalog instance type of your configuration, e.g. p5.48xlarge "
                            "or alicloud:ecs.gn7i-c8g1.2xlarge (sets GPU, GPUs per node, links, host memory, price)."),
    gpus_per_node: str = _o("--gpus-per-node", "GPUs per node (default 8)."),
    nodes: str = _o("--nodes", "Nodes (default 1)."),
    mfu: str = _o("--mfu", "Model FLOPs utilisation, 0..1 (default 0.4, an assumption)."),
    headroom: str = _o("--headroom", "Share of GPU and host memory kept free, 0..0.9 (default 0.1)."),
    deadline: str = _o("--deadline", "Hours the run may take; the cheapest option meets it."),
    lora_rank: str = _o("--lora-rank", "LoRA rank r, as PEFT's LoraConfig (default 8)."),
    lora_targets: str = _o("--lora-targets", "Modules given adapters, named as in the model: q_proj,k_proj,v_proj,"
                           "o_proj,gate_proj,up_proj,down_proj,lm_head, or all-linear (default q_proj,v_proj)."),
    modules_to_save: str = _o("--modules-to-save", "Modules trained whole: embed_tokens,lm_head."),
    adapter_config: str = _o("--adapter-config", "A PEFT adapter_config.json on disk (its r, target_modules, "
                             "modules_to_save)."),
    trainable_fraction: str = _o("--trainable-fraction", "Override: the trained share of N for LoRA/QLoRA, instead "
                                 "of counting the adapters from the shape."),
    price: str = _o("--price", "Your price per GPU-hour (with --currency, default USD)."),
    currency: str = _o("--currency", "Currency of --price: USD, CNY, ..."),
    scaling_efficiency: str = _o("--scaling-efficiency", "Share of perfect scaling your run reaches, 0..1 "
                                 "(default: from the links)."),
    egress_gb: str = _o("--egress-gb", "GB the run sends out of the cloud."),
    dataset_gb: str = _o("--dataset-gb", "Dataset GB kept in the object store."),
    checkpoint_gb: str = _o("--checkpoint-gb", "Checkpoint GB kept in the object store."),
    idle_hours: str = _o("--idle-hours", "Hours the fleet is up without training (development, debugging)."),
    allow_tcp: bool = _o("--allow-tcp", "Recommend multi-node ZeRO-3 fleets without RDMA too.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable estimate on stdout."),
    spec: Path = typer.Option(None, "--spec", help="YAML run spec with the same keys (flags win)."),
    stack: str = typer.Option(None, "--stack", "-s", help="Read a stack's GPU pool, image lock and goldenenv:run "
                              "(its estimate keys too); flags win."),
    plot: Path = typer.Option(None, "--plot", help="Write a PNG or SVG chart of memory and cost."),
) -> None:
    """Memory per GPU and host, training FLOPs, time and cost on every catalog instance type, before renting."""
    from goldenenv import estimate as est

    given = {k: v for k, v in locals().items() if k in est.SPEC_KEYS and v is not None}
    named: dict[str, str] = {}
    problems: list[str] = []
    if spec is not None:
        _merge(given, named, *_spec_file(spec, problems), problems)
    if stack is not None:
        _merge(given, named, *_stack_values(stack, problems), problems)
    # a spec or stack that could not be read, or held a value of the wrong shape, may hold what seems missing
    unread = bool(problems)
    if plot is not None:
        if plot.suffix.lower() not in (".png", ".svg"):
            problems.append(f"--plot: {plot} must end in .png or .svg")
        elif not plot.parent.is_dir():
            problems.append(f"--plot: the folder {plot.parent} does not exist; create it or write elsewhere")
    request, invalid = est.request_from(given, named=named, partial=unread)
    problems += invalid
    if problems:
        errors.print("[bold red]invalid estimate input[/]")
        for p in problems:
            key, _, message = p.partition(": ")
            errors.print(f"  [red]{escape(key)}[/]: {escape(message)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    result = est.estimate(request)
    if plot is not None:
        if result.memory is None:
            errors.print("[bold red]--plot[/]: needs a model (--params, --model or --config) to chart its memory")
            raise typer.Exit(2)
        try:
            est.figure(result).savefig(plot, format=plot.suffix.lower().lstrip("."))
        except OSError as e:
            errors.print(f"[bold red]--plot[/]: {escape(str(plot))} cannot be written: {escape(e.strerror or str(e))}")
            raise typer.Exit(2) from None
    if as_json:
        print(json.dumps(result.to_json(), indent=2, allow_nan=False))
        return
    _print(est, result)


def _merge(given: dict, named: dict, values: dict, names: dict, problems: list[str]) -> None:
    """Values from a spec file or stack under the flags (flags win), remembering how to name each in messages."""
    for key, value in values.items():
        if key not in given:
            given[key] = value
            named[key] = names[key]


def _spec_file(path: Path, problems: list[str]) -> tuple[dict, dict]:
    """The spec's values as written (text), for the same parser as the flags."""
    from goldenenv import estimate as est
    from goldenenv.estimate.specfile import read_spec
    from goldenenv.spec import ConfigError

    try:
        loaded = read_spec(path, str(path))
    except ConfigError as e:
        problems.extend(f"--spec: {p}" for p in e.problems)
        return {}, {}
    values, invalid = est.spec_problems({} if loaded is None else loaded, f"{path}")
    problems.extend(invalid)
    return values, {k: f"{path}: {k}" for k in values}


def _stack_values(stack: str, problems: list[str]) -> tuple[dict, dict]:
    """The stack's first GPU pool (instance type, nodes), its lock (DeepSpeed's pin) and goldenenv:run."""
    from goldenenv import project

    try:  # estimate runs outside a project too: -s needs the one here
        project.use(project.find())
    except project.NoProject as e:
        problems.append(f"--stack: {e}")
        return {}, {}
    return _spec_values(_stack_spec(stack), f"Pulumi.{stack}.yaml", problems)


def _spec_values(spec, where: str, problems: list[str]) -> tuple[dict, dict]:
    """A stack spec's first GPU pool, lock and goldenenv:run as estimate values, each named by `where` it is set."""
    from goldenenv import catalog
    from goldenenv import estimate as est

    values: dict = {"lock": spec.image.lock}
    names = {"lock": f"{where}: goldenenv:image.lock"}
    pool = next((p for p in spec.nodes if (spec.cloud, p.instance_type) in
                 {(r["cloud"], r["instance_type"]) for r in catalog.rows("instance_types")}), None)
    if pool is not None:
        values.update(instance_type=f"{spec.cloud}:{pool.instance_type}", nodes=pool.count)
        names.update(instance_type=f"{where}: goldenenv:nodes.instanceType", nodes=f"{where}: goldenenv:nodes.count")
    run = spec.run
    if run is not None:
        for key, value in (("egress_gb", run.egress_gb), ("dataset_gb", run.dataset_gb),
                           ("checkpoint_gb", run.checkpoint_gb), ("idle_hours", run.idle_hours)):
            if value:
                values[key], names[key] = value, f"{where}: goldenenv:run.{_camel(key)}"
        if run.scaling_efficiency != 1:
            values["scaling_efficiency"] = run.scaling_efficiency
            names["scaling_efficiency"] = f"{where}: goldenenv:run.scalingEfficiency"
        if run.price_per_gpu_hour is not None:
            values.update(price=run.price_per_gpu_hour, currency=_currency(spec.cloud))
            names.update(price=f"{where}: goldenenv:run.pricePerGpuHour", currency=f"{where}: goldenenv:run")
        if run.estimate is not None:
            extra, invalid = est.spec_problems(run.estimate, f"{where}: goldenenv:run.estimate")
            problems.extend(invalid)
            for key, value in extra.items():
                values[key], names[key] = value, f"{where}: goldenenv:run.estimate.{key}"
    return values, names


def _stack_spec(stack: str):
    """The stack's spec, checked by its cloud where the cloud's provider is installed: estimate reads only the
    catalog, so a stack on a cloud whose extra is not installed is read without that cloud's own checks (they live in
    its package, which imports the provider)."""
    from goldenenv import clouds, stackconfig
    from goldenenv.cli.common import fail
    from goldenenv.lifecycle import load_spec
    from goldenenv.plan import stack_file
    from goldenenv.spec import ConfigError

    try:
        return load_spec(stack)
    except clouds.ProviderMissing:
        return stackconfig.load(stack, *stackconfig.namespaced(stackconfig.read_stack_file(stack_file(stack))))
    except ConfigError as e:
        fail(e, stack_file(stack))


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _currency(cloud: str) -> str:
    from goldenenv import costs
    return costs._currency(cloud)


def _gib(value: float) -> str:
    return f"{value / 2**30:,.2f}"


VERDICT_STYLE = {"fits": "[green]fits[/]", "tight": "[yellow]tight[/]", "no": "[red]no[/]", None: "-"}


def _print(est, result) -> None:
    req, m, own = result.request, result.memory, result.own
    gpu = req.instance.gpu.name if req.instance else req.gpu
    shape = req.model_shape
    plural = "s" if req.nodes > 1 else ""
    where = f"{req.instance.name} × {req.nodes}" if req.instance else f"{own.gpus} GPUs ({req.nodes} node{plural})"
    console.print("[bold]goldenenv estimate[/] "
                  + (f"{shape.total_params:.3g} params · " if shape else "")
                  + (f"{req.tokens:.3g} tokens · " if req.tokens else "")
                  + f"{req.method} {req.precision} · ZeRO-{req.zero}{' offload' if req.offload else ''} · {where}",
                  highlight=False)
    if shape is not None:
        named = f"{shape.name}: " if shape.name else ""
        console.print(f"shape: {named}{shape.layers} layers, hidden {shape.hidden}, {shape.heads} heads "
                      f"({shape.kv_heads} key/value), {shape.mlp} MLP {shape.intermediate}, vocabulary {shape.vocab}"
                      f"{' (inferred from N, an assumption)' if shape.inferred else ''}; seq {req.seq_len}, "
                      f"micro-batch {req.micro_batch}, {req.attention} attention, checkpointing "
                      f"{'on' if req.checkpointing else 'off'}", highlight=False)
        console.print(f"DeepSpeed formulas: {escape(req.deepspeed_from)}", highlight=False)
        _print_peft(est, req)
    if m is not None:
        usable = est.gpu_usable_bytes(gpu) if gpu else None
        table = Table(title="memory per GPU", title_justify="left")
        table.add_column("component")
        table.add_column("GiB", justify="right")
        for label, value in (("model states (DeepSpeed)", m.model_states), *_state_rows(req, m),
                             ("activations", m.activations), ("logits", m.logits), ("overhead", m.overhead),
                             ("total", m.total)):
            table.add_row(label, _gib(value))
        if gpu:
            table.add_row(f"{gpu} as nvidia-smi reports it", _gib(usable))
            table.add_row(f"  less {req.headroom:.0%} headroom", _gib(usable * (1 - req.headroom)))
        table.add_row("host memory per node (DeepSpeed)", _gib(m.host_per_node))
        if req.instance:
            table.add_row(f"{req.instance.name} host memory", _gib(req.instance.memory_gib * 2**30))
        console.print(table)
        zt = Table(title=f"every ZeRO stage and offload variant ({own.gpus} GPUs, {req.nodes} node{plural}), as "
                   "DeepSpeed prints it, plus activations and overhead", title_justify="left")
        for col in ("ZeRO", "offload", "zero_init", "host/node GiB", "states/GPU GiB", "total/GPU GiB",
                    f"GPU {gpu or ''}".strip(), "host"):
            zt.add_column(col, justify="right" if "GiB" in col else "left")
        for row in result.table:
            offload = ("params+optimizer" if row["offload_params"] else "optimizer" if row["offload_optimizer"]
                       else "none")
            mark = "▶ " if row["chosen"] else ""
            zt.add_row(f"{mark}{row['zero']}", offload, "1" if row["zero_init"] else "0",
                       _gib(row["host_bytes_per_node"]), _gib(row["model_states_bytes_per_gpu"]),
                       _gib(row["total_bytes_per_gpu"]), VERDICT_STYLE[row["gpu_memory"]],
                       VERDICT_STYLE[row["host_memory"]])
        console.print(zt)
        console.print("fits: " + ", ".join(f"{name} {VERDICT_STYLE[v]}" for name, v in result.fits.items()),
                      highlight=False)
    flops = f"training FLOPs {result.training_flops:.3g} · MFU {result.mfu} · " if result.training_flops else ""
    if own.hours is not None:
        time = (f"{own.hours:,.1f} h ({own.ideal_hours:,.4g} h at perfect scaling ÷ {own.efficiency:.3g} "
                f"efficiency: {escape(own.efficiency_basis)})")
    else:
        time = "give --gpu or --instance-type (and --tokens) for the time on your own configuration"
    console.print(f"{flops}{time}", highlight=False)
    if own.parts:
        ct = Table(title="your run's cost", title_justify="left")
        for col in ("part", "amount", "how"):
            ct.add_column(col)
        for line in own.parts:
            amount = f"{line.amount:,.2f} {line.currency}" if line.amount is not None else "unpriced"
            ct.add_row(line.name, amount + ("" if line.verified else " *"), escape(line.basis))
        total = own.cost
        ct.add_row("[bold]total[/]", f"[bold]{total:,.2f} {own.parts[0].currency}[/]", "")
        console.print(ct)
    if result.options:
        _print_options(result, req)
    for a in est.assumptions(req):
        console.print(f"[dim]assumption: {escape(a)}[/]", highlight=False)


STATE_LABELS = {
    "frozen_16bit": "  frozen, 16-bit (embeddings, output layer, norms{})",
    "frozen_4bit": "  frozen, 4-bit NF4 (layers' Linear weights)",
    "quantization_constants": "  NF4 constants (absmax, double-quantized)",
    "gathered_layer": "  ZeRO-3's gathered frozen layer",
    "trainable_states": "  trained: weights + gradients + optimizer states",
}


def _state_rows(req, m) -> list[tuple[str, float]]:
    """Model states by category for LoRA/QLoRA (full training is one DeepSpeed figure)."""
    if req.method == "full" or not m.parts:
        return []
    rows = []
    for key, label in STATE_LABELS.items():
        if key in m.parts and (m.parts[key] or key in ("frozen_16bit", "trainable_states")):
            rows.append((label.format("" if req.method == "qlora" else ", Linear weights"), m.parts[key]))
    return rows


def _print_peft(est, req) -> None:
    """The LoRA as estimated and its counts, in PEFT's print_trainable_parameters words."""
    doc = est.peft_json(req)
    if doc is None:
        return
    what = escape(doc["source"]) if doc["rank"] is None else (
        f"{escape(req.lora.describe(req.model_shape))}, from {escape(doc['source'])}")
    console.print(f"{req.method}: {what}", highlight=False)
    console.print(f"trainable params: {doc['trainable_params']:,.0f} (adapters {doc['adapter_params']:,.0f}, "
                  f"trained whole {doc['saved_params']:,.0f}) || all params: {doc['all_params']:,.0f} || "
                  f"frozen {doc['frozen_params']:,.0f}, of which 4-bit {doc['quantized_params']:,.0f} and 16-bit "
                  f"{doc['frozen_16bit_params']:,.0f}", highlight=False)


def _print_options(result, req) -> None:
    title = ("cost per option: the smallest fleet that fits" +
             (f" and finishes within {req.deadline_hours:g} h" if req.deadline_hours else ""))
    t = Table(title=title, title_justify="left")
    for col in ("cloud", "instance type", "GPU", "capacity", "nodes", "network", "efficiency", "hours", "price/hour",
                "cost"):
        t.add_column(col)
    unverified = False
    for o in result.options:
        late = " [red]late[/]" if o.meets_deadline is False else ""
        tcp = " [red]ZeRO-3 over TCP[/]" if o.tcp_zero3 else ""
        mark = " *" if o.price_verified is False else ""
        unverified |= bool(mark)
        nodes = str(o.nodes) if o.fits else f"[red]does not fit[/] (GPU {o.gpu_memory}, host {o.host_memory})"
        t.add_row(o.cloud, o.instance_type, o.gpu, o.capacity, nodes, escape(o.network) + tcp,
                  f"{o.scaling_efficiency:.2f}" if o.scaling_efficiency is not None else "-",
                  f"{o.hours:,.1f}{late}" if o.hours is not None else "-",
                  f"{o.price_per_hour:,.2f} {o.currency}{mark}" if o.price_per_hour is not None else "unpriced",
                  f"{o.cost:,.0f} {o.currency}{mark}" if o.cost is not None else "-")
    console.print(t)
    if unverified:
        console.print("* unverified in the catalog, or a dated spot snapshot: check the price before you rely on it")
    for currency, o in sorted(result.cheapest.items()):
        console.print(f"[bold]cheapest ({currency})[/]: {o.cloud} {o.instance_type} x{o.nodes} {o.capacity}, "
                      f"{o.hours:,.1f} h at {o.scaling_efficiency:.2f} efficiency, {o.cost:,.0f} {currency}",
                      highlight=False)
    _print_families(result)
    if result.hours_basis:
        console.print(f"[dim]hours: {escape(result.hours_basis)}[/]", highlight=False)
    if result.no_recommendation:
        console.print(f"[yellow]{escape(result.no_recommendation)}[/]", highlight=False)
    if any(o.tcp_zero3 and o.fits for o in result.options) and not req.allow_tcp:
        console.print("[yellow]multi-node ZeRO-3 without RDMA is not recommended: it gathers every weight over TCP "
                      "each step; --allow-tcp to consider it[/]")


def _print_families(result) -> None:
    """NVIDIA and Ascend side by side (goldenenv.estimate.families), when the options hold more than one family."""
    rows = result.families
    if len({row.family for row in rows}) < 2:
        return
    t = Table(title="accelerator families side by side: each one's cheapest offer that fits, per currency",
              title_justify="left")
    for col in ("family", "offer", "memory/device", "memory/node", "run needs/device", "nodes", "hours", "cost"):
        t.add_column(col)
    for row in rows:
        o = row.offer
        if o is None:
            t.add_row(row.family, f"[yellow]none of {row.offers}[/]: {escape(row.why_none or '')}", *["-"] * 6)
            continue
        mark = " * (unverified price)" if o.price_verified is False else ""
        t.add_row(row.family, f"{o.cloud} {o.instance_type} ({o.gpus_per_node} x {o.gpu} {row.device_word}, "
                  f"{o.capacity})", _gib(o.usable_gib_per_device * 2**30), _gib(o.usable_gib_per_node * 2**30),
                  _gib(o.needed_gib_per_device * 2**30) if o.needed_gib_per_device is not None else "-",
                  str(o.nodes), f"{o.hours:,.1f} at {o.scaling_efficiency:.2f}",
                  f"{o.cost:,.0f} {o.currency}{mark}")
    console.print(t)


def print_stack_families(spec, stack: str) -> None:
    """plan's view of the same: NVIDIA and Ascend side by side for the run the stack describes
    (goldenenv:run.estimate: its model and its tokens or hours), at the stack's pool's scaling. Nothing when the stack
    describes no model to size; one line saying why when its run cannot be sized (a lock without DeepSpeed's pin)."""
    from goldenenv import estimate as est

    problems: list[str] = []
    values, names = _spec_values(spec, f"Pulumi.{stack}.yaml", problems)
    if problems or not {"params", "model", "config", "layers"} & set(values):
        return
    request, invalid = est.request_from(values, named=names, partial=False)
    if invalid:
        console.print(f"[yellow]accelerator families side by side: not sized[/]: {escape('; '.join(invalid))}",
                      highlight=False)
        return
    _print_families(est.estimate(request))

"""The estimate as a chart: memory per GPU by component against each catalog GPU's usable memory, and the cost of
each option (red: misses the deadline). Building the figure writes nothing; the caller saves it (Agg backend)."""

from __future__ import annotations

from goldenenv import catalog
from goldenenv.estimate.footprint import GiB
from goldenenv.estimate.request import gpu_usable_bytes


def figure(est):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 5.5), layout="constrained")
    mem_ax, cost_ax = fig.subplots(1, 2, width_ratios=(1, 2.2))
    m = est.memory
    bottom = 0.0
    for label, value in (("model states", m.model_states), ("activations", m.activations), ("logits", m.logits),
                         ("overhead", m.overhead)):
        mem_ax.bar(["per GPU"], [value / GiB], bottom=[bottom], label=label)
        bottom += value / GiB
    for name in sorted(catalog.gpus(), key=gpu_usable_bytes):
        usable = gpu_usable_bytes(name) / GiB
        mem_ax.axhline(usable, linestyle="--", linewidth=0.8, color="grey")
        mem_ax.annotate(name, (0.42, usable), fontsize=7, va="bottom")
    mem_ax.set_ylabel("GiB per GPU (lines: usable memory as nvidia-smi reports it)")
    mem_ax.set_title(f"memory per GPU, ZeRO-{est.request.zero}, {est.gpus} GPUs")
    mem_ax.legend(fontsize=7, loc="upper left")

    priced = [o for o in est.options if o.cost is not None]
    labels = [f"{o.cloud} {o.instance_type} x{o.nodes} {o.capacity}" for o in priced]
    colours = ["tab:green" if o.meets_deadline is not False and not o.tcp_zero3 else "tab:red" for o in priced]
    cost_ax.barh(labels, [o.cost for o in priced], color=colours)
    for i, o in enumerate(priced):
        cost_ax.annotate(f" {o.cost:,.0f} {o.currency}", (o.cost, i), fontsize=7, va="center")
    if priced:
        cost_ax.set_xscale("log")
    cost_ax.set_xlabel("run cost (catalog price; USD and CNY not converted)")
    cost_ax.set_title("cost per option (red: late, or ZeRO-3 over TCP)")
    cost_ax.tick_params(axis="y", labelsize=7)
    return fig

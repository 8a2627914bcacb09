"""What every option is timed on, and the line that says why none can be recommended.

The work: with --tokens, the run's training FLOPs (6·N·T, or LoRA's); with --hours, what the user's own
configuration (--instance-type or --gpu, × --gpus-per-node × --nodes) computes in those hours at the estimator's
throughput model, GPUs × the GPU's dense bf16 peak × MFU. Each option's hours are that work over its own GPUs'
throughput, ÷ its scaling efficiency: the user's hours scaled by the option's speed against the configuration they
were measured on. Hours given without a GPU to measure them on time the user's own run only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from goldenenv import catalog


def flops_in_hours(hours: float | None, gpu: str | None, gpus: int, mfu: float) -> float | None:
    """FLOPs that `gpus` GPUs of the catalog's `gpu` do in `hours` at perfect scaling and `mfu`; None when the hours,
    the GPU or its peak are unknown."""
    peak = catalog.gpu_peak_tflops().get(gpu) if gpu else None
    if hours is None or peak is None:
        return None
    return hours * 3600 * gpus * peak.bf16_dense_tflops * 1e12 * mfu


def hours_basis(hours: float | None, gpu: str | None, gpus: int, instance: str | None) -> str | None:
    """How the options' hours were found from --hours, as the table says it; None without --hours."""
    if hours is None or gpu is None or gpu not in catalog.gpu_peak_tflops():
        return None
    where = f"{instance}, {gpus} × {gpu}" if instance else f"{gpus} × {gpu}"
    return (f"your --hours {hours:g} at perfect scaling on {where}, scaled by each option's GPUs × peak TFLOPS "
            "against it, then ÷ the option's scaling efficiency")


def no_recommendation(options: Iterable[Any], deadline_hours: float | None, timed: bool, hours_given: bool,
                      max_nodes: int) -> str:
    """Why no option is recommended, in terms of what the user asked: memory, time, price, then the deadline
    only when one was given."""
    found = list(options)
    fitting = [o for o in found if o.fits]
    if not fitting:
        return f"no option fits the run in memory on up to {max_nodes} nodes"
    if not timed:
        if hours_given:
            return ("no option is timed: --hours needs the GPU it was measured on (--gpu or --instance-type, with "
                    "--gpus-per-node and --nodes) to scale it to each option")
        return "no option is timed: give --tokens, or --hours with the GPU they were measured on"
    priced = [o for o in fitting if o.cost is not None]
    if not priced:
        return "no option that fits has a catalog price"
    if deadline_hours is not None and not any(o.meets_deadline for o in priced):
        return f"no priced option fits and finishes within {deadline_hours:g} h"
    return "every priced option that fits is multi-node ZeRO-3 over TCP; --allow-tcp to consider them"

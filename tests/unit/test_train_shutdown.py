"""examples/train_ddp.py ends a finished run in order, so a rank never aborts at exit and Slurm records COMPLETED.

The example runs under a recording stand-in for torch (torch is not installed here): what a user would see is the
order of the calls each rank makes into torch.distributed and when "done" is printed.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"


class Calls(list):
    """What a rank did, in order: torch.distributed calls, printed events, released tensors."""


def fake_torch(calls: Calls, rank: int) -> dict[str, types.ModuleType]:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    dist = types.ModuleType("torch.distributed")

    def record(name, result=None):
        def call(*args, **kwargs):
            calls.append(name)
            return result
        return call

    for name in ("init_process_group", "barrier", "destroy_process_group", "all_reduce", "broadcast_object_list"):
        setattr(dist, name, record(name))
    dist.get_rank = lambda: rank
    dist.get_world_size = lambda: 2
    nn = types.ModuleType("torch.nn")
    nn.Module = object
    parallel = types.ModuleType("torch.nn.parallel")
    parallel.DistributedDataParallel = object
    utils, data = types.ModuleType("torch.utils"), types.ModuleType("torch.utils.data")
    sampler = types.ModuleType("torch.utils.data.distributed")
    sampler.DistributedSampler = object
    torch.distributed, torch.nn, torch.utils = dist, nn, utils
    return {"torch": torch, "torch.distributed": dist, "torch.nn": nn, "torch.nn.parallel": parallel,
            "torch.utils": utils, "torch.utils.data": data, "torch.utils.data.distributed": sampler}


class Tensor:
    """Stands for a collective's tensor: records when it is released."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.cycle = self  # held by a reference cycle, as DDP's buckets and hooks hold theirs

    def __del__(self) -> None:
        self.calls.append("tensor released")


@pytest.fixture
def example(monkeypatch):
    """Load the example as rank `rank` with `train` replaced by `run(calls)`; returns (module, calls)."""
    def load(rank: int, run):
        calls = Calls()
        for name, module in fake_torch(calls, rank).items():
            monkeypatch.setitem(sys.modules, name, module)
        spec = importlib.util.spec_from_file_location(f"train_ddp_rank{rank}", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        monkeypatch.setattr(module, "train", lambda args, stop: run(calls))
        monkeypatch.setattr(module.StopRequest, "install", lambda self: None)
        return module, calls

    automatic = gc.isenabled()
    gc.disable()  # the run must release its tensors itself, not by the luck of an automatic collection
    yield load
    if automatic:
        gc.enable()


def finished(calls: Calls) -> dict:
    Tensor(calls)  # the last all-reduce's tensor, alive in a cycle when train returns
    calls.append("trained")
    return {"event": "done", "final_step": 2}


def test_a_finished_rank_waits_for_the_others_releases_its_tensors_then_takes_the_group_down(example, capsys):
    module, calls = example(0, finished)
    assert module.main(["--steps", "2"]) == 0
    assert calls == ["init_process_group", "trained", "barrier", "tensor released", "destroy_process_group"]
    out = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in out] == [{"event": "done", "final_step": 2}]


def test_done_is_printed_only_by_rank_0_and_only_after_the_group_is_gone(example, capsys, monkeypatch):
    module, calls = example(0, finished)
    monkeypatch.setattr(module.dist, "destroy_process_group",
                        lambda: calls.append(f"destroy_process_group, printed so far: {capsys.readouterr().out!r}"))
    module.main([])
    assert calls[-1] == "destroy_process_group, printed so far: ''"
    assert '"event": "done"' in capsys.readouterr().out

    module, calls = example(1, finished)
    assert module.main([]) == 0
    assert capsys.readouterr().out == ""
    assert calls[-2:] == ["tensor released", "destroy_process_group"]


def test_a_rank_that_fails_leaves_at_once_without_waiting_for_the_others(example, capsys):
    def fails(calls):
        calls.append("step 1")
        raise RuntimeError("out of memory")

    module, calls = example(1, fails)
    with pytest.raises(RuntimeError, match="out of memory"):
        module.main([])
    assert calls == ["init_process_group", "step 1", "destroy_process_group"]
    assert "done" not in capsys.readouterr().out


def test_the_process_leaves_without_finalization_once_its_output_is_flushed(example, monkeypatch):
    module, calls = example(0, finished)
    flushed = []
    monkeypatch.setattr(sys, "stdout", types.SimpleNamespace(flush=lambda: flushed.append("stdout")))
    monkeypatch.setattr(sys, "stderr", types.SimpleNamespace(flush=lambda: flushed.append("stderr")))
    monkeypatch.setattr(module.os, "_exit", lambda code: flushed.append(f"exit {code}"))
    module.exit_now(0)
    assert flushed == ["stdout", "stderr", "exit 0"]

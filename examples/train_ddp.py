"""A small real DDP training that survives being killed: launch it with torchrun on every node.

    torchrun --nnodes N --nproc-per-node G ... train_ddp.py --steps 200 --checkpoint-every 20

An MLP learns a fixed nonlinear function of synthetic inputs generated from --seed (no downloads).
Rank 0 writes a checkpoint every K steps, atomically (temporary file, fsync, rename), then points
`latest` at it; on start every rank resumes from the checkpoint rank 0 chose, so a node lost to a
spot interruption costs at most K steps. The checkpoint directory must be shared by all nodes.
At the end every rank waits for the others, the process group is taken down, and rank 0 prints one JSON line
with "event": "done" (see shut_down for why this order keeps a finished run from ending FAILED).

A spot notice costs nothing: on SIGUSR1 or SIGTERM (sent by goldenenv-spotwatch, or by torchrun when it is
stopped) a rank finishes its current step; the ranks agree on the stop at the step boundary (the flag rides on
the loss all-reduce), rank 0 checkpoints that last completed step, prints a JSON line with "event":
"interrupted", and every rank exits 0. A restart resumes at the next step.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

CHECKPOINT = re.compile(r"^step-(\d{8})\.pt$")
LATEST = "latest"
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
FEATURES = 16
SAMPLES = 4096


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.pt"


def _fsync_directory(directory: Path) -> None:
    """Make a rename durable: the directory entry is data too."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(target: Path, write) -> None:
    """Write through `write(file)` to a temporary name beside `target`, fsync it, then rename it over `target`.

    A crash at any point leaves either the old `target` or the new one, never a partial file under its name.
    """
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def checkpoint_steps(directory: Path) -> list[int]:
    """Steps of the complete checkpoints in `directory`, oldest first; temporary files are not checkpoints."""
    if not directory.is_dir():
        return []
    return sorted(int(m.group(1)) for p in directory.iterdir() if (m := CHECKPOINT.match(p.name)))


def save_checkpoint(directory: Path, step: int, state: dict, keep: int = 3) -> Path:
    """Write `state` as step-<step>.pt, point `latest` at it, and keep only the newest `keep` checkpoints.

    Checkpoints past `step` belong to a run that was abandoned before its `latest` moved on; they are removed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / checkpoint_name(step)
    _write_atomically(target, lambda f: torch.save(state, f))
    _write_atomically(directory / LATEST, lambda f: f.write(f"{target.name}\n".encode()))
    steps = checkpoint_steps(directory)
    stale = [s for s in steps if s > step] + [s for s in steps if s <= step][:-keep]
    for s in stale:
        (directory / checkpoint_name(s)).unlink(missing_ok=True)
    return target


def checkpoint_candidates(directory: Path) -> list[Path]:
    """Checkpoints to try, best first: the one `latest` names, then every complete one, newest first."""
    candidates = [directory / checkpoint_name(s) for s in reversed(checkpoint_steps(directory))]
    pointer = directory / LATEST
    if pointer.is_file():
        named = pointer.read_text().strip()
        if CHECKPOINT.match(named) and (directory / named).is_file():
            candidates.remove(directory / named)
            candidates.insert(0, directory / named)
    return candidates


def latest_checkpoint(directory: Path) -> Path | None:
    """The checkpoint to resume from, or None for a fresh start."""
    candidates = checkpoint_candidates(directory)
    return candidates[0] if candidates else None


def load_checkpoint(path: Path) -> dict:
    """Tensors land on the CPU; load_state_dict moves them to the model's device."""
    return torch.load(path, map_location="cpu", weights_only=True)


def first_loadable(directory: Path) -> tuple[Path, dict] | None:
    """The best checkpoint that actually loads; one damaged behind our back is reported and skipped."""
    for path in checkpoint_candidates(directory):
        try:
            return path, load_checkpoint(path)
        except Exception as e:  # a truncated or corrupt file: fall back to an older one
            print(f"skipping unreadable checkpoint {path.name}: {e}", file=sys.stderr, flush=True)
    return None


def synthetic_dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of a fixed nonlinear regression, identical on every rank for the same seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    mixing = torch.randn(FEATURES, 8, generator=g) / FEATURES**0.5
    weights = torch.randn(8, 1, generator=g)
    y = torch.sin(2 * x @ mixing) @ weights + 0.05 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))


def rng_states() -> dict:
    states = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def restore_rng(states: dict) -> None:
    torch.set_rng_state(states["torch"].cpu())
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"].cpu())


class StopRequest:
    """Set by a stop signal; read only at step boundaries, so a step is never cut in half."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
            # os.write, not print: a handler may run in the middle of another write to stderr
            os.write(2, f"rank {os.environ.get('RANK', '?')}: {signal.Signals(signum).name}: "
                        "checkpointing after the current step\n".encode())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="total optimizer steps, counting resumed ones")
    parser.add_argument("--checkpoint-every", type=int, default=20, metavar="K")
    parser.add_argument("--checkpoint-dir", type=Path,
                        default=Path(os.environ.get("GOLDENENV_CHECKPOINTS", "checkpoints")))
    parser.add_argument("--keep", type=int, default=3, help="checkpoints kept on disk")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--sleep-per-step", type=float, default=0.0, metavar="SECONDS",
                        help="slow each step down, so a drill can kill a node mid-run")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.checkpoint_every < 1 or args.keep < 1 or args.batch_size < 1:
        parser.error("--steps, --checkpoint-every, --keep and --batch-size must be at least 1")
    return args


def resume_state(directory: Path, rank: int) -> tuple[str, dict] | None:
    """Rank 0 picks the checkpoint and tells the others, so every rank resumes from the same step."""
    found = first_loadable(directory) if rank == 0 else None
    choice = [found[0].name if found else None]
    dist.broadcast_object_list(choice, src=0)
    if choice[0] is None:
        return None
    return choice[0], found[1] if found else load_checkpoint(directory / choice[0])


def train(args: argparse.Namespace, stop: StopRequest | None = None) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    else:
        device = torch.device("cpu")

    model = build_model(args.seed).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    resumed_from = None
    resumed = resume_state(args.checkpoint_dir, rank)
    if resumed is not None:
        name, state = resumed
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        restore_rng(state["rng"])
        resumed_from = state["step"]
    dist.barrier()  # nobody writes a checkpoint (or prunes the one just loaded) before every rank has read it
    if rank == 0:
        if resumed_from is None:
            print("starting fresh", flush=True)
        else:
            print(f"resumed from step {resumed_from} ({name}, written by world size {state['world_size']})",
                  flush=True)

    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    x, y = synthetic_dataset(args.seed)
    sampler = DistributedSampler(range(SAMPLES), num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    batches_per_epoch = len(sampler) // args.batch_size
    if batches_per_epoch < 1:
        raise SystemExit(f"--batch-size {args.batch_size} exceeds the {len(sampler)} samples per rank")
    loss_fn = nn.MSELoss()

    stop = stop or StopRequest()
    first_loss = last_loss = None
    step = resumed_from or 0
    epoch, order = None, []
    while step < args.steps:
        step += 1
        # the batch depends only on the step, so a resumed run sees the data an uninterrupted one would
        if epoch != (step - 1) // batches_per_epoch:
            epoch = (step - 1) // batches_per_epoch
            sampler.set_epoch(epoch)
            order = list(sampler)
        start = ((step - 1) % batches_per_epoch) * args.batch_size
        idx = torch.tensor(order[start:start + args.batch_size])
        inputs, targets = x[idx].to(device), y[idx].to(device)

        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(inputs), targets)
        loss.backward()
        optimizer.step()

        # one all-reduce carries the loss and whether any rank was asked to stop: every rank stops at this step
        asked = torch.tensor(1.0 if stop.signum else 0.0, dtype=torch.float64, device=device)
        reduced = torch.stack([loss.detach().double(), asked])
        dist.all_reduce(reduced)
        last_loss = reduced[0].item() / world_size
        stopping = reduced[1].item() > 0
        if first_loss is None:
            first_loss = last_loss
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            print(f"step {step} loss {last_loss:.5f}", flush=True)

        if step % args.checkpoint_every == 0 or step == args.steps or stopping:
            if rank == 0:
                state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "rng": rng_states(), "world_size": world_size}
                path = save_checkpoint(args.checkpoint_dir, step, state, keep=args.keep)
                print(f"checkpoint {path.name}", flush=True)
            dist.barrier()
        if stopping and step < args.steps:
            cause = signal.Signals(stop.signum).name if stop.signum else "another rank's stop signal"
            if rank == 0:
                print(f"stopped by {cause} after step {step}: checkpoint "
                      f"{args.checkpoint_dir / checkpoint_name(step)}; a restart resumes at step {step + 1}",
                      flush=True)
            return {"event": "interrupted", "cause": cause, "final_step": step,
                    "checkpoint": str(args.checkpoint_dir / checkpoint_name(step)), "resumed_from": resumed_from,
                    "first_loss": first_loss, "last_loss": last_loss, "world_size": world_size}
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)

    return {"event": "done", "final_step": step, "resumed_from": resumed_from,
            "first_loss": first_loss, "last_loss": last_loss, "world_size": world_size}


def shut_down(rank: int, summary: dict) -> None:
    """End a run that every rank finished: no rank leaves while another still uses the group, then the group goes.

    Why the order matters: a rank whose process reaches interpreter finalization with the process group, or one of
    its collectives, still alive can die at exit instead of ending. The group's C++ worker threads (gloo's) still hold
    the last collectives' tensors; released during finalization, a tensor's Python object needs an interpreter that
    is going away, the thread is stopped and the process aborts with "terminate called without an active exception"
    (SIGABRT). torchrun then reports the worker group failed and Slurm records the job FAILED although rank 0 printed
    "done" (PyTorch issue 190489 and pull request 179291 describe the abort). Short runs with no sleep between steps
    hit it most: a rank reaches its exit while another is still in the last all-reduce or barrier.
    So: a barrier (every rank is past its last collective), nothing of the training left holding a tensor
    (gc.collect), destroy_process_group (the group's threads end while the interpreter is whole), and only then
    "done": a run that prints it has also ended in order.
    """
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(summary), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = StopRequest()
    stop.install()  # before the process group forms: a notice during start-up is kept for the first step
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend=backend, init_method="env://", timeout=timedelta(minutes=10))
    rank = dist.get_rank()
    try:
        summary = train(args, stop)
    except BaseException:
        # a rank that failed leaves now, nonzero: a barrier would wait for ranks that may never reach it
        dist.destroy_process_group()
        raise
    shut_down(rank, summary)
    return 0


def exit_now(code: int) -> None:
    """Flush what was printed and leave without interpreter finalization: the group is gone and every file is
    written, so finalization has nothing left to do but run C++ destructors in an order nobody controls."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())

"""Runs on every rank under torchrun (torch only): a timed all_reduce across all nodes.

Rank 0 prints one JSON line with the bus bandwidth in the nccl-tests convention:
algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        device = torch.device("cuda")
    data = torch.ones(args.bytes // 4, dtype=torch.float32, device=device)
    for _ in range(args.warmup):
        dist.all_reduce(data)
    data.fill_(1.0)
    if backend == "nccl":
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(data)
        data.div_(world)
    if backend == "nccl":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.iters
    correct = bool(torch.allclose(data, torch.ones_like(data)))
    flags = torch.tensor([int(correct)], device=device)
    dist.all_reduce(flags)
    if rank == 0:
        algbw = args.bytes / seconds / 1e9
        print(json.dumps({"event": "allreduce", "backend": backend, "world_size": world, "bytes": args.bytes,
                          "seconds": seconds, "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world,
                          "ok": int(flags.item()) == world}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

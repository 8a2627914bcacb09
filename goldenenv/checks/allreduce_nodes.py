"""Runs on every rank under torchrun (torch only): a timed all_reduce across all nodes.

Rank 0 prints one JSON line with the bus bandwidth in the nccl-tests convention:
algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
The collective is the devices': HCCL on Ascend NPUs (torch_npu registers torch.npu and the hccl backend when it is
imported), NCCL on CUDA GPUs, gloo on CPUs; a CPU run is never the devices' figure.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def _devices():
    """(backend, torch's device module or None, device type) of the devices this rank has."""
    try:
        import torch_npu  # noqa: F401  (Ascend: importing it registers torch.npu and the hccl backend)
    except ImportError:
        torch_npu = None
    if torch_npu is not None and torch.npu.is_available():
        return "hccl", torch.npu, "npu"
    if torch.cuda.is_available():
        return "nccl", torch.cuda, "cuda"
    return "gloo", None, "cpu"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    backend, devices, kind = _devices()
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(kind)
    if devices is not None:
        devices.set_device(int(os.environ["LOCAL_RANK"]))
    data = torch.ones(args.bytes // 4, dtype=torch.float32, device=device)
    for _ in range(args.warmup):
        dist.all_reduce(data)
    data.fill_(1.0)
    if devices is not None:
        devices.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(data)
        data.div_(world)
    if devices is not None:
        devices.synchronize()
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

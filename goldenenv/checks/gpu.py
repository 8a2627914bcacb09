"""GPU-host checks over captured command output: nvidia-smi, a torch probe, all-reduce runs.

The image checks run these commands on a node through testinfra and hand stdout to the pure
functions here, so every rule is unit-tested on captured output without a GPU. Expected GPU models
and counts come from the catalog, the driver minimum and GPU archs from the image lock.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass

from goldenenv import catalog
from goldenenv.catalog import version_tuple

NVIDIA_SMI_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,driver_version,memory.total,compute_cap",
    "--format=csv,noheader,nounits",
]
_SMI_FIELDS = ("index", "name", "driver_version", "memory.total", "compute_cap")
_SMI_FAILURES = ("NVIDIA-SMI has failed", "No devices were found", "couldn't communicate with the NVIDIA driver")
_DRIVER = re.compile(r"^\d+(\.\d+)+$")
_MEMORY_MIB = re.compile(r"^(\d+)(\s*MiB)?$")
_COMPUTE_CAP = re.compile(r"^\d+\.\d+$")

MEMORY_SLACK = 0.03
"""nvidia-smi reports MiB net of reserved memory while vendors quote GB (sometimes GiB): a catalog
size matches when it lies between the reported GiB and the reported GB, give or take this much
(H100 80 GB reads 81559 MiB, A10G 24 GB reads 23028 MiB: modal-labs/modal-client#2797)."""


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    """The marketing name, e.g. "NVIDIA H100 80GB HBM3"."""
    driver: str
    memory_mib: int
    compute_cap: str
    """e.g. "9.0" (the catalog writes it as arch sm_90)."""


@dataclass(frozen=True)
class HostFinding:
    check: str
    ok: bool
    message: str
    """One line naming what was expected (catalog or lock) and what the host has."""


def parse_nvidia_smi(stdout: str) -> list[GpuInfo]:
    """GPUs from the output of NVIDIA_SMI_QUERY; ValueError when nvidia-smi failed or printed something else."""
    text = stdout.strip()
    if not text:
        raise ValueError(f"{' '.join(NVIDIA_SMI_QUERY)} printed nothing: no GPU listed")
    if any(marker in text for marker in _SMI_FAILURES):
        raise ValueError(f"nvidia-smi failed on this host (driver not loaded or no GPU): {text.splitlines()[0]}")
    gpus = [_smi_line(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    repeated = sorted(i for i, n in Counter(g.index for g in gpus).items() if n > 1)
    if repeated:
        raise ValueError(f"nvidia-smi lists GPU index {', '.join(map(str, repeated))} more than once")
    return gpus


def _smi_line(number: int, line: str) -> GpuInfo:
    fields = [f.strip() for f in line.split(",")]
    where = f"nvidia-smi line {number} ({line.strip()!r})"
    if len(fields) != len(_SMI_FIELDS):
        raise ValueError(f"{where}: expected {len(_SMI_FIELDS)} comma-separated fields "
                         f"({', '.join(_SMI_FIELDS)}), got {len(fields)}")
    index, name, driver, memory, cap = fields
    memory_match = _MEMORY_MIB.match(memory)
    for field, ok in (("index", index.isdigit()), ("name", bool(name)), ("driver_version", bool(_DRIVER.match(driver))),
                      ("memory.total", bool(memory_match)), ("compute_cap", bool(_COMPUTE_CAP.match(cap)))):
        if not ok:
            raise ValueError(f"{where}: {field} is unreadable")
    return GpuInfo(int(index), name, driver, int(memory_match.group(1)), cap)


def catalog_gpu(info: GpuInfo) -> str | None:
    """The catalog's GPU key for what nvidia-smi reports, or None when the catalog has no such GPU.

    A catalog key starts with the model as NVIDIA names it (H100-80GB → H100); a GPU matches when that
    model is a word of its name, its compute capability is the key's arch and its memory the key's size.
    """
    words = {w.upper() for w in re.findall(r"[A-Za-z0-9]+", info.name)}
    arch = "sm_" + info.compute_cap.replace(".", "")
    reported_gib = info.memory_mib / 1024
    reported_gb = info.memory_mib * 2**20 / 1e9
    candidates = [
        gpu for gpu in catalog.gpus().values()
        if gpu.name.split("-")[0].upper() in words
        and gpu.arch == arch
        and reported_gib * (1 - MEMORY_SLACK) <= gpu.memory_gib <= reported_gb * (1 + MEMORY_SLACK)
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda gpu: abs(gpu.memory_gib - reported_gib)).name


def check_gpus(gpus: list[GpuInfo], cloud: str, instance_type: str, min_driver: str) -> list[HostFinding]:
    """The host has the catalog's GPUs for its instance type, on one driver no older than the lock needs."""
    try:
        expected = catalog.instance_type(cloud, instance_type)
    except KeyError:
        known = ", ".join(sorted(catalog.instance_types(cloud))) or "none"
        return [HostFinding("instance-type", False,
                            f"{cloud} {instance_type} is not in the catalog (instance_types.csv lists: {known})")]
    want = f"{expected.gpu_count} x {expected.gpu.name} (catalog, {expected.name})"
    found = _tally(g.name for g in gpus) or "no GPU"
    return [
        HostFinding("gpu-count", len(gpus) == expected.gpu_count, f"expected {want}, found {found}"),
        _model_finding(gpus, expected, want),
        _driver_minimum_finding(gpus, min_driver),
        _driver_uniform_finding(gpus),
    ]


def _model_finding(gpus: list[GpuInfo], expected: catalog.InstanceType, want: str) -> HostFinding:
    models = {g.index: catalog_gpu(g) for g in gpus}
    wrong = [g for g in gpus if models[g.index] != expected.gpu.name]
    if not gpus:
        return HostFinding("gpu-model", False, f"expected {want}, found no GPU")
    if not wrong:
        return HostFinding("gpu-model", True, f"every GPU is {expected.gpu.name} (catalog, {expected.name}): "
                                              f"{_tally(g.name for g in gpus)}")
    described = _tally(f"{g.name} ({models[g.index] or 'not in the catalog'})" for g in wrong)
    model = expected.gpu
    return HostFinding("gpu-model", False,
                       f"expected every GPU to be {model.name} ({model.arch}, {model.memory_gib} GB; catalog, "
                       f"{expected.name}), found {described} on GPU {_indices(wrong)}")


def _driver_minimum_finding(gpus: list[GpuInfo], min_driver: str) -> HostFinding:
    if not gpus:
        return HostFinding("driver-minimum", False, f"expected a driver >= {min_driver} (lock minimum), found no GPU")
    old = [g for g in gpus if not _at_least(g.driver, min_driver)]
    if old:
        drivers = "; ".join(f"{driver} on GPU {_indices(group)}" for driver, group in _by_driver(old).items())
        return HostFinding("driver-minimum", False, f"driver {drivers} is below the lock minimum {min_driver}")
    return HostFinding("driver-minimum", True,
                       f"driver {', '.join(_by_driver(gpus))} >= {min_driver} (lock minimum) on all {len(gpus)} GPUs")


def _driver_uniform_finding(gpus: list[GpuInfo]) -> HostFinding:
    groups = _by_driver(gpus)
    if not gpus:
        return HostFinding("driver-uniform", False, "expected one driver on every GPU, found no GPU")
    if len(groups) == 1:
        return HostFinding("driver-uniform", True, f"every GPU reports driver {next(iter(groups))}")
    described = "; ".join(f"{driver} on GPU {_indices(group)}" for driver, group in groups.items())
    return HostFinding("driver-uniform", False, f"expected one driver on every GPU, found {described}")


def check_host_driver(gpus: list[GpuInfo], node: str, pinned_driver: str) -> HostFinding:
    """Every GPU reports the driver the node's host image pins: another one means the node was changed
    after boot (a package upgrade, a hand install), so the catalog's compatibility verdict no longer holds."""
    if not gpus:
        return HostFinding("host-driver", False,
                           f"node {node}: expected driver {pinned_driver} (host image pin), found no GPU")
    drifted = [g for g in gpus if not _same_driver(g.driver, pinned_driver)]
    if drifted:
        drivers = "; ".join(f"{driver} on GPU {_indices(group)}" for driver, group in _by_driver(drifted).items())
        return HostFinding("host-driver", False,
                           f"node {node} drifted from its host image: driver {drivers}, the image pins {pinned_driver}")
    return HostFinding("host-driver", True,
                       f"node {node} runs driver {pinned_driver}, as its host image pins, on all {len(gpus)} GPUs")


def _same_driver(have: str, want: str) -> bool:
    return _at_least(have, want) and _at_least(want, have)


def _at_least(have: str, want: str) -> bool:
    """Driver comparison that treats missing components as 0 (570.26 == 570.26.0)."""
    a, b = version_tuple(have), version_tuple(want)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def _by_driver(gpus: list[GpuInfo]) -> dict[str, list[GpuInfo]]:
    groups: dict[str, list[GpuInfo]] = {}
    for g in sorted(gpus, key=lambda g: g.index):
        groups.setdefault(g.driver, []).append(g)
    return dict(sorted(groups.items(), key=lambda item: -len(item[1])))


def _tally(names) -> str:
    return ", ".join(f"{n} x {name}" for name, n in Counter(names).items())


def _indices(gpus: list[GpuInfo]) -> str:
    return ",".join(str(g.index) for g in sorted(gpus, key=lambda g: g.index))


TORCH_PROBE = '''\
import json

import torch


def nccl_version():
    """The NCCL torch loads, as "2.21.5"; None on a CPU build."""
    try:
        import torch.cuda.nccl
        return ".".join(str(part) for part in torch.cuda.nccl.version()[:3])
    except Exception:
        return None


print(json.dumps({
    "torch": str(torch.__version__),
    "cuda": torch.version.cuda,
    "cuda_available": torch.cuda.is_available(),
    "device_count": torch.cuda.device_count(),
    "arch_list": torch.cuda.get_arch_list(),
    "nccl": nccl_version(),
    "cudnn": torch.backends.cudnn.version(),
}))
'''
"""`python -c TORCH_PROBE` prints one JSON line: what the image's torch sees on this host."""

_TORCH_PROBE_KEYS = ("torch", "cuda", "cuda_available", "device_count", "arch_list", "nccl", "cudnn")
_KERNEL_IMAGE = "no kernel image is available for execution on the device"


def parse_torch_probe(stdout: str) -> dict:
    probe = _last_json_object(stdout, "torch probe")
    missing = [key for key in _TORCH_PROBE_KEYS if key not in probe]
    if missing:
        raise ValueError(f"torch probe output lacks {', '.join(missing)}: {json.dumps(probe)}")
    return probe


def check_torch_gpu(probe: dict, expected_gpus: int, gpu_archs: list[str]) -> list[HostFinding]:
    """torch sees every GPU, and its wheel carries kernels for every arch the lock targets (one finding each)."""
    build = f"torch {probe['torch']} (CUDA {probe['cuda'] or 'none: a CPU build'})"
    seen = probe["device_count"] if probe["cuda_available"] else 0
    message = f"expected torch to see {expected_gpus} GPUs, {build} sees {seen}"
    if probe["device_count"] and not probe["cuda_available"]:
        message += f" (torch.cuda.is_available() is False with {probe['device_count']} devices listed: driver too old?)"
    findings = [HostFinding("torch-gpus", seen == expected_gpus, message)]
    arch_list = probe["arch_list"] or []
    for arch in gpu_archs:
        if has_kernels(arch_list, arch):
            findings.append(HostFinding(f"torch-arch-{arch}", True, f"{arch} is in {build}'s get_arch_list()"))
        else:
            findings.append(HostFinding(
                f"torch-arch-{arch}", False,
                f"the lock targets {arch} but {build} lists [{' '.join(arch_list)}]: its CUDA kernels would fail "
                f"with '{_KERNEL_IMAGE}' (pytorch/pytorch#90761)"))
    return findings


def has_kernels(arch_list: list[str], arch: str) -> bool:
    """sm_90 is served by sm_90 or the arch-specific sm_90a / sm_90f cubins."""
    return any(re.fullmatch(rf"{re.escape(arch)}[af]?", entry) for entry in arch_list)


ALLREDUCE_PROBE = '''\
"""All-reduce across every local GPU (NCCL, one process per GPU) and print one JSON line."""
import argparse
import json
import socket
import sys
import tempfile
import traceback
from pathlib import Path

# Spawned workers unpickle their function by module name, which a `python -c` program does not
# have: the worker is written to a temporary module first.
WORKER = """
import time

import torch
import torch.distributed as dist


def run(rank, world_size, port, backend, elements, warmup, iters, results):
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")

    def sync():
        if backend == "nccl":
            torch.cuda.synchronize(device)

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        tensor = torch.ones(elements, dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        sync()
        seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        tensor.fill_(1.0)
        dist.all_reduce(tensor)
        sync()
        correct = bool(torch.all(tensor == world_size).item())
        results.put({"rank": rank, "world_size": dist.get_world_size(), "correct": correct,
                     "seconds": seconds.item()})
    finally:
        dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(prog="allreduce-probe")
    parser.add_argument("--bytes", type=int, default=1 << 30, help="message size (float32 elements x 4)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backend", choices=["nccl", "gloo"], default="nccl",
                        help="gloo runs on CPU, to try the probe on a host without GPUs")
    parser.add_argument("--world-size", type=int, default=0, help="default: every visible GPU (nccl), 2 (gloo)")
    args = parser.parse_args()

    import torch
    import torch.multiprocessing as mp

    if args.world_size:
        world = args.world_size
    else:
        world = torch.cuda.device_count() if args.backend == "nccl" else 2
    report = {"world_size": world, "ok": False, "backend": args.backend}
    if world < 1:
        report["error"] = f"torch {torch.__version__} sees no CUDA device"
        print(json.dumps(report))
        return 1
    elements = max(args.bytes // 4, 1)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "goldenenv_allreduce_worker.py").write_text(WORKER)
        sys.path.insert(0, tmp)
        import goldenenv_allreduce_worker as worker

        results = mp.get_context("spawn").SimpleQueue()
        try:
            mp.spawn(worker.run, nprocs=world, join=True,
                     args=(world, free_port(), args.backend, elements, args.warmup, args.iters, results))
        except Exception as e:
            lines = [line for line in str(e).splitlines() if line.strip()] or traceback.format_exc().splitlines()
            report["error"] = lines[-1].strip()
            print(json.dumps(report))
            return 1
        ranks = [results.get() for _ in range(world)]
    seconds = max(r["seconds"] for r in ranks)
    nbytes = elements * 4
    algbw = nbytes / seconds / 1e9
    report.update(
        ok=all(r["correct"] and r["world_size"] == world for r in ranks),
        bytes=nbytes,
        iters=args.iters,
        seconds=seconds,
        algbw_gbps=algbw,
        busbw_gbps=algbw * 2 * (world - 1) / world,
    )
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
'''
"""`python -c ALLREDUCE_PROBE [--bytes N]` all-reduces a tensor of ones over every local GPU and prints
{"world_size", "ok", "seconds", "busbw_gbps", ...}; bandwidths in GB/s (10^9 bytes), as nccl-tests prints them."""

_BUSBW_TOLERANCE = 0.01


FUSED_ADAM_PROBE = '''\
import json
import time

import torch

result = {"ok": False}
try:
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.adam import FusedAdam

    result["prebuilt"] = bool(installed_ops.get("fused_adam"))
    torch.manual_seed(0)
    start = [torch.randn(1 << 20, device="cuda") for _ in range(4)]
    grads = [torch.randn_like(p) for p in start]
    fused = [torch.nn.Parameter(p.clone()) for p in start]
    plain = [torch.nn.Parameter(p.clone()) for p in start]
    for params in (fused, plain):
        for param, grad in zip(params, grads):
            param.grad = grad.clone()
    began = time.perf_counter()
    FusedAdam(fused, lr=1e-3, adam_w_mode=True, weight_decay=0.01).step()
    torch.cuda.synchronize()
    result["seconds"] = time.perf_counter() - began
    torch.optim.AdamW(plain, lr=1e-3, weight_decay=0.01, foreach=False).step()
    result["max_abs_diff"] = max((a - b).abs().max().item() for a, b in zip(fused, plain))
    result["moved"] = min((a - p).abs().max().item() for a, p in zip(fused, start))
    result["device"] = torch.cuda.get_device_name(0)
    result["ok"] = result["max_abs_diff"] < 1e-5 and result["moved"] > 0
except Exception as e:  # reported, not raised: the check says what failed
    result["error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(result))
'''
"""`python -c FUSED_ADAM_PROBE`: one DeepSpeed FusedAdam step on GPU 0, compared with torch's AdamW on the same
parameters and gradients. Prints {"ok", "prebuilt", "max_abs_diff", "moved", "seconds", "device"} or an "error"."""

FUSED_ADAM_TOLERANCE = 1e-5


def check_fused_adam(stdout: str) -> HostFinding:
    """FusedAdam ran on the GPU from the image's prebuilt op and agrees with AdamW; a JIT build is a failure too."""
    result = _last_json_object(stdout, "FusedAdam probe")
    if "error" in result:
        return HostFinding("fused-adam", False, f"DeepSpeed FusedAdam step failed: {result['error']}")
    if not result.get("prebuilt"):
        return HostFinding("fused-adam", False, "DeepSpeed FusedAdam is not prebuilt in the image: every cold start "
                                                "would compile it with nvcc")
    if not result.get("ok"):
        return HostFinding("fused-adam", False, f"DeepSpeed FusedAdam step differs from torch AdamW by "
                                                f"{result.get('max_abs_diff')} (tolerance {FUSED_ADAM_TOLERANCE}) "
                                                f"or left the parameters unchanged")
    return HostFinding("fused-adam", True, f"DeepSpeed FusedAdam step on {result.get('device')} in "
                                           f"{result.get('seconds', 0) * 1000:.1f} ms, within "
                                           f"{result['max_abs_diff']:.1e} of AdamW")


def allreduce_busbw(nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' all_reduce bus bandwidth in GB/s: algbw = bytes / seconds, busbw = algbw * 2(n-1)/n."""
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks


def parse_allreduce(stdout: str) -> dict:
    """The JSON ALLREDUCE_PROBE printed; ValueError when missing or when its busbw disagrees with its own timing."""
    result = _last_json_object(stdout, "all-reduce probe")
    missing = [key for key in ("world_size", "ok") if key not in result]
    if result.get("ok"):
        missing += [key for key in ("bytes", "seconds", "busbw_gbps") if key not in result]
    if missing:
        raise ValueError(f"all-reduce probe output lacks {', '.join(missing)}: {json.dumps(result)}")
    if result["ok"]:
        expected = allreduce_busbw(result["bytes"], result["seconds"], result["world_size"])
        if abs(result["busbw_gbps"] - expected) > _BUSBW_TOLERANCE * max(expected, 1e-9):
            raise ValueError(f"all-reduce probe reports busbw {result['busbw_gbps']:.3f} GB/s but its bytes, seconds "
                             f"and world size give {expected:.3f} GB/s (nccl-tests formula)")
    return result


class NcclTestsResult(list):
    """The per-size rows (dicts) of an nccl-tests run, with the run's summary lines."""

    avg_busbw_gbps: float | None = None
    """From "# Avg bus bandwidth : X" (GB/s), None when the output was cut before it."""
    ranks: int | None = None
    """How many "#  Rank N ..." device lines the output lists, None when it lists none."""


_PERF_COLUMNS = ("time_us", "algbw_gbps", "busbw_gbps", "wrong")
_RANK_LINE = re.compile(r"^#\s+Rank\s+\d+\s")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")


def parse_nccl_tests(stdout: str) -> NcclTestsResult:
    """Rows of all_reduce_perf (nccl-tests) output: size, count, type, redop, root, then time (us),
    algbw, busbw (GB/s) and #wrong out-of-place and in-place (#wrong None when printed N/A).
    Lines may carry srun's "0: " label."""
    result = NcclTestsResult()
    ranks = 0
    for raw in stdout.splitlines():
        line = re.sub(r"^\s*\d+:\s", "", raw).strip()
        if _RANK_LINE.match(line):
            ranks += 1
        elif avg := _AVG_BUSBW.match(line):
            result.avg_busbw_gbps = float(avg.group(1))
        elif row := _nccl_row(line.split()):
            result.append(row)
    if not result and result.avg_busbw_gbps is None:
        raise ValueError("no nccl-tests result rows and no '# Avg bus bandwidth' line in this output")
    result.ranks = ranks or None
    return result


def _nccl_row(tokens: list[str]) -> dict | None:
    if len(tokens) != 13 or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    try:
        return {
            "size_bytes": int(tokens[0]),
            "count": int(tokens[1]),
            "type": tokens[2],
            "redop": tokens[3],
            "root": int(tokens[4]),
            "out_of_place": _perf(tokens[5:9]),
            "in_place": _perf(tokens[9:13]),
        }
    except ValueError:
        return None


def _perf(tokens: list[str]) -> dict:
    time_us, algbw, busbw, wrong = tokens
    values = (float(time_us), float(algbw), float(busbw), None if wrong == "N/A" else int(wrong))
    return dict(zip(_PERF_COLUMNS, values))


def _last_json_object(stdout: str, what: str) -> dict:
    """The last line that is a JSON object: warnings and logs may come before it."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(doc, dict):
                return doc
    last = lines[-1] if lines else "(nothing)"
    raise ValueError(f"{what} printed no JSON object; its last line: {last}")

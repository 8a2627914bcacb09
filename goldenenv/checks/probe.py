"""Runs INSIDE an image or on a node (stdlib only): prints one JSON object describing what is there.

The checks send this file's source to the host once and compare every pin of the lock with
what it reports, so a whole suite costs one `docker exec` / one SSH round trip.
"""

import ctypes
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import pwd
import re
import shutil
import subprocess
import sys

SKIP = ("/proc", "/sys", "/dev", "/run")


def os_release():
    try:
        with open("/etc/os-release") as f:
            return dict(line.rstrip("\n").replace("\"", "").split("=", 1) for line in f if "=" in line)
    except OSError:
        return {}


def packages():
    found = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        found[name] = dist.version
    return found


def site_library(pattern):
    """A shared library from NVIDIA's wheels (site-packages/nvidia/*/lib) or the system's."""
    for root in sys.path:
        hits = sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", pattern)))
        if hits:
            return hits[0]
    hits = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/" + pattern) + glob.glob("/usr/local/cuda*/lib64/" + pattern))
    return hits[0] if hits else None


def library_version(pattern, symbol, decode, returns_value=False):
    path = site_library(pattern)
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        if returns_value:
            getattr(lib, symbol).restype = ctypes.c_size_t
            return decode(getattr(lib, symbol)())
        value = ctypes.c_int()
        if getattr(lib, symbol)(ctypes.byref(value)) != 0:
            return "error"
        return decode(value.value)
    except (OSError, AttributeError) as e:
        return "error: %s" % e


def nccl_code(v):
    return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100) if v >= 20900 else "%d.%d.%d" % (v // 1000, v // 100 % 10, v % 100)


def torch_facts():
    try:
        import torch
    except ImportError:
        return None
    facts = {"version": torch.__version__, "cuda": torch.version.cuda, "nccl": None, "cudnn": None, "arch_flags": None}
    if torch.version.cuda:
        # the archs torch was compiled for; torch.cuda.get_arch_list() says [] where no GPU is visible
        facts["arch_flags"] = torch._C._cuda_getArchFlags().split()
        try:
            facts["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception as e:  # noqa: BLE001 - reported, not raised
            facts["nccl"] = "error: %s" % e
        version = torch.backends.cudnn.version()
        facts["cudnn"] = "%d.%d.%d" % (version // 10000, version // 100 % 100, version % 100) if version else None
    return facts


LIBRARIES = ("libnccl.so", "libcudart.so", "libcublas.so", "libcudnn.so", "libnccl-net")
"""Libraries an image must carry once: each name's files, by the path they resolve to."""
COMPILERS = ("nvcc",)
"""Programs no image carries (the CUDA compiler lives in a builder stage)."""


def files_named():
    """One walk of the file system: the copies of each library in LIBRARIES and every file named in COMPILERS."""
    found = {name: set() for name in LIBRARIES + COMPILERS}
    for root, dirs, files in os.walk("/"):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in SKIP]
        for name in files:
            for wanted in LIBRARIES:
                if name.startswith(wanted):
                    found[wanted].add(os.path.realpath(os.path.join(root, name)))
            if name in COMPILERS:
                found[name].add(os.path.join(root, name))
    return {name: sorted(paths) for name, paths in found.items()}


def os_packages():
    """Debian packages installed (dpkg's status file): name → version."""
    try:
        with open("/var/lib/dpkg/status") as f:
            entries = f.read().split("\n\n")
    except OSError:
        return {}
    found = {}
    for entry in entries:
        fields = dict(line.split(": ", 1) for line in entry.splitlines() if ": " in line and not line[0].isspace())
        if fields.get("Status") == "install ok installed" and "Package" in fields:
            found[fields["Package"]] = fields.get("Version", "")
    return dict(sorted(found.items()))


def scheduler():
    """The Slurm daemons' and munge's own version lines, where the image has them."""
    found = {name: command([name, "-V"]) for name in ("slurmd", "slurmctld") if shutil.which(name)}
    if shutil.which("munged"):
        found["munged"] = command(["munged", "--version"])
    return found


NO_GPU_PRELUDE = """import os, sys
if not os.path.exists("/dev/nvidiactl"):
    sys.modules["triton"] = None
"""
"""Importing DeepSpeed with its CUDA accelerator starts Triton's GPU driver when Triton is installed, which fails
where no GPU is: there, Triton is hidden from DeepSpeed (its Triton kernels serve inference only). On a GPU node
nothing is hidden."""


def deepspeed_facts(modules):
    """DeepSpeed's own report (ds_report) and, for each compiled op's module, whether it imports on this host."""
    try:
        importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return None
    report = NO_GPU_PRELUDE + "from deepspeed.env_report import cli_main\nsys.argv = ['ds_report']\ncli_main()\n"
    imports = {m: command([sys.executable, "-c", NO_GPU_PRELUDE + "import importlib, torch\n"
                                                                  "importlib.import_module(%r)\n" % m])
               for m in modules}
    return {"report": command([sys.executable, "-c", report]), "imports": imports,
            "triton_hidden": not os.path.exists("/dev/nvidiactl")}

def efa_installed():
    try:
        with open("/opt/amazon/efa_installed_packages") as f:
            return f.read()
    except OSError:
        return None


def command(args):
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
        return {"rc": done.returncode, "out": (done.stdout + done.stderr)[-4000:]}
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"rc": None, "out": str(e)}


def spotwatch():
    """Where the spot-notice watcher is on PATH, and whether it starts (--help)."""
    path = shutil.which("goldenenv-spotwatch")
    return dict(command([path, "--help"]), path=path) if path else None


ASCEND = "/usr/local/Ascend"
TORCH_NPU = ("import json, torch, torch_npu; print(json.dumps({'version': torch_npu.__version__, "
             "'available': torch_npu.npu.is_available(), 'count': torch_npu.npu.device_count(), "
             "'cann': torch_npu.utils.get_cann_version(module='CANN')}))")


def key_values(path):
    """A version file of CANN or the NPU driver (key=value lines), or None when it is not there."""
    try:
        with open(path) as f:
            return dict(line.strip().split("=", 1) for line in f if "=" in line)
    except OSError:
        return None


def ascend_facts():
    """Huawei Ascend, where /usr/local/Ascend is: CANN's version files (both layouts, before and from CANN 8.5), the
    NPU driver's version.info and npu-smi (on a node, the driver's read-only mounts), and what torch_npu says (in a
    process of its own: importing it loads CANN's libraries, which may abort)."""
    if not os.path.isdir(ASCEND):
        return None
    infos = sorted(glob.glob(ASCEND + "/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info")
                   + glob.glob(ASCEND + "/cann/*-linux/ascend_toolkit_install.info"))
    npu_smi = shutil.which("npu-smi")
    torch_npu = None
    if importlib.util.find_spec("torch_npu") is not None:
        done = command([sys.executable, "-c", TORCH_NPU])
        try:
            torch_npu = json.loads(done["out"].strip().splitlines()[-1]) if done["rc"] == 0 else {"error": done["out"]}
        except (ValueError, IndexError):
            torch_npu = {"error": done["out"]}
    return {"cann": {path: key_values(path) for path in infos},
            "driver": key_values(ASCEND + "/driver/version.info"),
            "npu_smi": command([npu_smi, "info"]) if npu_smi else None,
            "torch_npu": torch_npu}


def main(argv):
    """argv: the compiled extension modules the lock's DeepSpeed ops must provide."""
    user = pwd.getpwuid(os.getuid())
    files = files_named()
    print(json.dumps({
        "os_release": os_release(),
        "python": platform.python_version(),
        "user": {"name": user.pw_name, "uid": user.pw_uid},
        "packages": packages(),
        "pip_check": command([sys.executable, "-m", "pip", "check"]),
        "env": dict(os.environ),
        "torch": torch_facts(),
        "nccl": library_version("libnccl.so.2", "ncclGetVersion", nccl_code),
        "cuda_runtime": library_version("libcudart.so.1*", "cudaRuntimeGetVersion",
                                        lambda v: "%d.%d" % (v // 1000, v % 1000 // 10)),
        "cudnn": library_version("libcudnn.so.*", "cudnnGetVersion",
                                 lambda v: "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100), returns_value=True),
        "library_files": {name: files[name] for name in LIBRARIES},
        "compilers": {name: files[name] for name in COMPILERS},
        "cuda_toolkits": sorted(glob.glob("/usr/local/cuda*")),
        "os_packages": os_packages(),
        "deepspeed": deepspeed_facts(argv),
        "efa_installed": efa_installed(),
        "libfabric": command(["/opt/amazon/efa/bin/fi_info", "--version"]) if os.path.exists(
            "/opt/amazon/efa/bin/fi_info") else None,
        "ofi_plugin": sorted(glob.glob("/opt/amazon/ofi-nccl/lib*/libnccl-net*.so*")),
        "erdma_provider": sorted(glob.glob("/usr/lib/*/libibverbs/liberdma*")),
        "mlx5_provider": sorted(glob.glob("/usr/lib/*/libibverbs/libmlx5*")),
        "spotwatch": spotwatch(),
        "scheduler": scheduler(),
        "ascend": ascend_facts(),
    }))


if __name__ == "__main__":
    main(sys.argv[1:])

"""The compressed bytes of a lock's Python layers, from the package index, for images that cannot be built here.

Every pinned distribution is looked up in the index's JSON simple API (PEP 691/700), the file whose sha256 the
lock pins is found, and its size counted: wheels are deflate-compressed like image layers, so their sum is the
pull size of those layers within a few percent. Prints one line per layer and the share of the largest files;
the OS, fabric and base layers are not counted (measure them with bench_images.py where they can be built).

    python scripts/bench_gpu_image_size.py aws-h100 alicloud-h100 [--index https://pypi.org/simple]
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from goldenenv.images.lock import GROUPS, load  # noqa: E402

ACCEPT = "application/vnd.pypi.simple.v1+json"


def index_files(index: str, name: str, context: ssl.SSLContext) -> list[dict]:
    request = urllib.request.Request(f"{index.rstrip('/')}/{name}/", headers={"Accept": ACCEPT})
    with urllib.request.urlopen(request, timeout=60, context=context) as answer:
        return json.load(answer)["files"]


def pinned_sizes(lock_name: str, index: str, context: ssl.SSLContext) -> dict[str, tuple[str, str, int]]:
    """distribution → (group, file name, bytes) of the file whose hash the lock pins."""
    lock = load(lock_name)
    found = {}
    for name, pin in lock.packages.items():
        wanted = set(pin.sha256)
        for f in index_files(index, name, context):
            if f.get("hashes", {}).get("sha256") in wanted and f.get("size"):
                found[name] = (pin.group, f["filename"], int(f["size"]))
                break
        else:
            print(f"  {lock_name}: no file with a pinned hash and a size for {name} {pin.version}", file=sys.stderr)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locks", nargs="+")
    parser.add_argument("--index", default="https://pypi.org/simple")
    args = parser.parse_args()
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    for lock_name in args.locks:
        sizes = pinned_sizes(lock_name, args.index, context)
        total = sum(size for _, _, size in sizes.values())
        print(f"{lock_name}: {len(sizes)} distributions, {total / 1e9:.2f} GB compressed (Python layers)")
        for group in GROUPS:
            in_group = sum(size for g, _, size in sizes.values() if g == group)
            print(f"  layer {group:8s} {in_group / 1e9:6.2f} GB  {in_group / total:5.1%}")
        for name, (_, filename, size) in sorted(sizes.items(), key=lambda kv: -kv[1][2])[:6]:
            print(f"  {size / 1e9:6.2f} GB  {filename}")
        nvidia = sum(size for name, (_, _, size) in sizes.items() if name.startswith("nvidia-"))
        print(f"  NVIDIA CUDA wheels (the image's only CUDA copy): {nvidia / 1e9:.2f} GB")


if __name__ == "__main__":
    main()

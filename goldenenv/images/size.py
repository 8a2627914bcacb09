"""How big a built image is: on disk, as a node pulls it (gzip), and which Dockerfile steps weigh the most.

Shared by the image benchmark and by the cold-start model of `goldenenv plan`, so both count the same bytes.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

import docker

GZIP_LEVEL = 1
"""`gzip -1`: about what a registry push costs in CPU, and close to the layer blobs a node downloads."""
CHUNK = 4 * 1024 * 1024
SAVE_TIMEOUT = 1800
"""Seconds the engine may take between two chunks of `docker save` (a GPU image's first chunk takes minutes)."""
SHELL_PREFIX = re.compile(r"^(\|\d+ (\S+=\S* )*)?/bin/sh -c ")
NOP = "#(nop) "


@dataclass(frozen=True)
class Layer:
    size: int
    """Bytes the layer adds, uncompressed."""
    step: str
    """The Dockerfile instruction that created it, as the engine recorded it."""


def uncompressed_bytes(image: docker.models.images.Image) -> int:
    """Bytes of all the image's layers on disk, base included (what `docker images` shows)."""
    return int(image.attrs["Size"])


def gzip_bytes(chunks: Iterable[bytes], level: int = GZIP_LEVEL) -> int:
    """Length of the gzip stream of `chunks`, compressed on the fly: nothing is kept but the count."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    total = 0
    for chunk in chunks:
        total += len(compressor.compress(chunk))
    return total + len(compressor.flush())


def compressed_bytes(client: docker.DockerClient, tag: str, level: int = GZIP_LEVEL) -> int:
    """Bytes of `docker save TAG | gzip -1`, streamed from the engine: no archive is written anywhere."""
    image = client.images.get(tag)
    named = tag if tag in image.tags else False
    timeout, client.api.timeout = client.api.timeout, max(client.api.timeout or 0, SAVE_TIMEOUT)
    try:  # the engine assembles a multi-GB archive before its first byte: longer than the SDK's 60 s default
        return gzip_bytes(image.save(chunk_size=CHUNK, named=named), level)
    finally:
        client.api.timeout = timeout


def shared_bytes(image: docker.models.images.Image, stem: docker.models.images.Image) -> int:
    """Bytes of `image`'s layers that are `stem`'s own (the same build steps on this engine): what a node that
    already holds the stem does not pull again."""
    stem_ids = {entry["Id"] for entry in stem.history() if entry.get("Id") not in (None, "<missing>")}
    return sum(int(entry.get("Size", 0)) for entry in image.history() if entry.get("Id") in stem_ids)


def over_limit(compressed: int, limit_gb: float | None) -> str:
    """`2.09 GB (35%) under its 6 GB limit` / `0.40 GB over ...`, GB = 10^9 bytes as the lock's maxCompressedGb."""
    if limit_gb is None:
        return "no size limit in its lock"
    limit = limit_gb * 1e9
    margin = limit - compressed
    side = "under" if margin >= 0 else "over"
    return f"{abs(margin) / 1e9:.2f} GB ({100 * abs(margin) / limit:.0f}%) {side} its {limit_gb:g} GB limit"


def step_of(created_by: str) -> str:
    """`/bin/sh -c #(nop) COPY dir:... in /opt/venv/` → `COPY dir:... in /opt/venv/`; a shell step → `RUN ...`."""
    text = created_by.strip()
    shell = SHELL_PREFIX.match(text)
    if not shell:
        return text
    command = text[shell.end():].strip()
    return command[len(NOP):].strip() if command.startswith(NOP) else f"RUN {command}"


def largest_layers(image: docker.models.images.Image, n: int = 3, dockerfile: str | None = None) -> list[Layer]:
    """The n history entries that add the most bytes, largest first; steps that add no bytes are left out.

    With the Dockerfile the image was built from, each step is named by its own line (`COPY --from=layer-torch
    ...` rather than the engine's `COPY dir:<checksum> ...`) wherever the history lines up with it.
    """
    history = list(reversed(image.history()))  # oldest first
    steps = [step_of(entry.get("CreatedBy") or "") or _base_step(entry) for entry in history]
    if dockerfile:
        steps = _named_by(steps, final_stage_steps(dockerfile))
    layers = [Layer(int(entry["Size"]), step) for entry, step in zip(history, steps) if entry.get("Size", 0) > 0]
    return sorted(layers, key=lambda layer: -layer.size)[:n]


def final_stage_steps(dockerfile: str) -> list[str]:
    """The instructions that made the last stage's image, its parent stages' first, one line each, FROMs left out."""
    stages: list[tuple[str, list[str]]] = []  # (parent, instructions) per stage
    names: dict[str, int] = {}
    for instruction in _instructions(dockerfile):
        words = instruction.split()
        if words[0].upper() != "FROM":
            if stages:
                stages[-1][1].append(instruction)
            continue
        refs = [w for w in words[1:] if not w.startswith("--")]
        stages.append((refs[0].lower(), []))
        if len(refs) == 3 and refs[1].upper() == "AS":
            names[refs[2].lower()] = len(stages) - 1
    if not stages:
        return []
    index = len(stages) - 1
    parent, steps = stages[index]
    while names.get(parent, index) < index:  # FROM names only an earlier stage
        index = names[parent]
        parent, body = stages[index]
        steps = body + steps
    return steps


def _instructions(dockerfile: str) -> list[str]:
    """Instructions with their continuation lines joined; comments and blank lines dropped."""
    found, current = [], ""
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        joined = stripped.endswith("\\")
        current += (" " if current else "") + (stripped[:-1].strip() if joined else stripped)
        if not joined:
            found.append(current)
            current = ""
    return found + ([current] if current else [])


def _named_by(steps: list[str], lines: list[str]) -> list[str]:
    """The Dockerfile's lines in place of the engine's, when both agree step by step on the instruction."""
    offset = len(steps) - len(lines)  # the base's own history comes first
    if offset < 0:
        return steps
    for recorded, line in zip(steps[offset:], lines):
        if recorded.split()[:1] != [line.split()[0].upper()]:
            return steps
    return steps[:offset] + lines


def _base_step(entry: dict) -> str:
    """An imported base records no instruction, only a comment (`Imported from -`)."""
    return f"(base) {(entry.get('Comment') or 'no instruction recorded').strip()}"

"""The node tools a golden image carries as one file each, with what they find by discovery bundled in:
goldenenv-health with every fabric's and accelerator family's health judge (goldenenv/fabrics/<name>/health.py,
goldenenv/accelerators/<family>/health.py), goldenenv-spotwatch with
every cloud's spot notice module (goldenenv/clouds/<cloud>/spot_notice.py).

In the package each script reads those modules from their folders; an image has no package, so the build writes
their sources into the script's own BUNDLED_* table (one line of it, `NAME: ... = {}`, empty in the package), and
the script loads them from there the same way. The list of modules is the script's own discovery, so a fabric or
cloud folder added to the package is in the next image with no other file changed.
"""

from __future__ import annotations

from pathlib import Path

from goldenenv import spotwatch
from goldenenv.health import judge


def bundle(script: Path | str, table: str, parts: dict[str, Path]) -> bytes:
    """The script's text (a file, or the text itself) with its `table` line (`TABLE: ... = {}`) holding each
    part's source by name."""
    text = script.read_text(encoding="utf-8") if isinstance(script, Path) else script
    lines = text.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith(f"{table}: ") and line.rstrip().endswith("= {}")]
    if len(at) != 1:
        raise RuntimeError(f"{script}: found {len(at)} lines `{table}: ... = {{}}` to bundle into; it needs one")
    entries = "".join(f"    {name!r}: {path.read_text(encoding='utf-8')!r},\n" for name, path in parts.items())
    lines[at[0]] = lines[at[0]].rstrip()[:-2] + "{\n" + entries + "}\n"
    return "".join(lines).encode()


def health_judge() -> bytes:
    """goldenenv-health: the node health judge with every fabric's and accelerator family's judge."""
    with_fabrics = bundle(Path(judge.__file__), "BUNDLED_FABRICS", judge.fabric_judge_files())
    return bundle(with_fabrics.decode(), "BUNDLED_ACCELERATORS", judge.accelerator_judge_files())


def spot_watcher() -> bytes:
    """goldenenv-spotwatch: the spot notice watcher with every cloud's notice module."""
    return bundle(Path(spotwatch.__file__), "BUNDLED_CLOUDS", spotwatch.notice_files())

"""The team file the cluster applies (lead's placeholder until the team helper's module is merged)."""

from __future__ import annotations

import hashlib

from goldenenv import gpuprice
from goldenenv.spec import ClusterSpec


def team_path(spec: ClusterSpec) -> str:
    from goldenenv.jobs import places

    return f"{places(spec).jobs}/.goldenenv/team.tsv"


def applied_path(spec: ClusterSpec) -> str:
    return team_path(spec).removesuffix(".tsv") + ".applied"


def team_file(spec: ClusterSpec) -> str:
    from goldenenv.slurm.config import accounting_tres

    lines = []
    for m in getattr(spec, "team", []):
        minutes = "-" if m.gpu_hours is None else str(round(m.gpu_hours * 60))
        lines.append(f"member\t{m.name}\t{m.uid}\t{m.share}\t{minutes}\t{m.ssh_public_key}")
    cluster = gpuprice.cluster_gpu_minutes(spec)
    lines.append(f"cluster\t{'-' if cluster is None else cluster}\t{accounting_tres(spec)}")
    return "\n".join(lines) + "\n"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()

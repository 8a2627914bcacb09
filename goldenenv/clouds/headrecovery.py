"""What happens to a stack's Slurm head when it is lost, cloud by cloud: what brings it back with nobody doing
anything, what brings it back when that does not, and what the queue keeps.

Each cloud says it as data in its own folder (HEAD_RECOVERY in clouds/<cloud>/head_recovery.py), with the public page
it rests on. README's "When the head is lost" table, under "What survives what", is made from them (readme_table), and a contract test holds
every shipped stack's planned head to its cloud's claim (HeadRecovery.problems): a head planned so that the cloud
would not bring it back (auto-recovery turned off, a spot head) is caught.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

UNSET = None
"""In HeadRecovery.planned: the input left out of the program, so the cloud's default applies."""
README_HEADER = ("| cloud | back by itself | otherwise | the queue | source |", "|---|---|---|---|---|")


@dataclass(frozen=True, kw_only=True)
class HeadRecovery:
    cloud: str
    """The cloud as the README names it."""
    by_itself: str
    """What brings the head back with no command from anyone, and how fast."""
    otherwise: str
    """What brings it back when that does not (a deleted head, a failure the cloud's recovery does not cover)."""
    queue: str
    """What the queue (slurmctld's state) keeps across it."""
    source: str
    """The public page the claim about the cloud rests on."""
    head_type: str | None = None
    """The type token of the head's machine in the plan; None: the cloud's head is not a planned resource (local)."""
    planned: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """Dotted input path of the head's machine -> the values under which `by_itself` holds (UNSET: left out)."""

    def problems(self, props: Mapping[str, Any]) -> list[str]:
        """Where a planned head's inputs break the claim: one line per input, naming it and what would hold."""
        found = []
        for path, allowed in self.planned.items():
            value = _at(props, path)
            if value not in allowed:
                shown = " or ".join("left out" if a is UNSET else repr(a) for a in allowed)
                found.append(f"{path} is {value!r}: {self.cloud} brings the head back by itself only with {shown} "
                             f"({self.source})")
        return found

    def readme_line(self) -> str:
        return f"| {self.cloud} | {self.by_itself} | {self.otherwise} | {self.queue} | [page]({self.source}) |"


def _at(props: Mapping[str, Any], path: str) -> Any:
    value: Any = props
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return UNSET
        value = value[key]
    return value


def of(cloud: str) -> HeadRecovery:
    """The cloud's claim, from its folder (goldenenv/clouds/<cloud>/head_recovery.py)."""
    return importlib.import_module(f"goldenenv.clouds.{cloud}.head_recovery").HEAD_RECOVERY


def readme_table(cloud_names: list[str]) -> list[str]:
    """README's table of what brings a lost head back on each cloud: its header, then one line per cloud, those with
    a planned head first (the clouds by name, then this machine's containers)."""
    ordered = sorted(cloud_names, key=lambda name: (of(name).head_type is None, name))
    return [*README_HEADER, *(of(name).readme_line() for name in ordered)]

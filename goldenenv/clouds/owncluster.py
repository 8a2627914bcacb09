"""The cluster of a cloud goldenenv provisions itself, as the shared steps drive it.

A cloud whose `uses_pulumi` is False (the local cloud) has no Pulumi program: `up`, `destroy`, `run`, `validate`,
`health`, the drills and the queue commands ask its Cloud.own_cluster for this, and only this. Its nodes and Slurm
head are containers of this machine's Docker engine (NodeReach.DOCKER); how they are made, reached, fed code and
struck is the cloud's own (goldenenv/clouds/<cloud>/), so the shared steps keep the order and judge the results
without importing a cloud's folder.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from goldenenv.streams import Line, RunResult


class OwnCluster(Protocol):
    """One stack's cluster on a cloud goldenenv provisions itself; every method is safe to call again."""

    client: Any
    """The Docker engine its containers run on, where the stack's golden image is built (docker.DockerClient)."""

    def up(self, image: str, log: Callable[[str], None]) -> dict:
        """Create what is missing from `image`, start what is stopped; the stack's outputs (the standard ones)."""

    def destroy(self, purge_data: bool, log: Callable[[str], None], drop_accounting: bool = False) -> list[str]:
        """Remove the cluster, its data too only with purge_data; the names removed. The accounting history is
        exported to the kept data first, and a failed export removes nothing (unless drop_accounting)."""

    def node_names(self) -> list[str]:
        """The stack's node containers by name, node-0 first (the head is not one); [] before `up`."""

    def sync_code(self, folder: Path) -> None:
        """Copy `folder` to the code folder of the stack's shared storage, where every node sees it."""

    def run(self, command: list[str], on_line: Line, user: str) -> RunResult:
        """Run `command` under torchrun on every node at once as `user`, each line passed on with its node's name;
        the first rank to fail stops the run on every node."""

    def read_shared(self, path: str) -> str | None:
        """A file of the shared storage as the first node reads it; None when it cannot (no such file)."""

    def head(self) -> Any:
        """The Slurm head's container (Docker SDK: exec_run, put_archive), or None (no Slurm, or not up)."""

    def scheduler_nodes(self) -> list:
        """Every node as slurmctld sees it (slurm.view.Node); [] when the head is not running."""

    def kill_node(self, name: str) -> None:
        """Kill a node as a lost instance dies: at once, with no shutdown (its ranks die with it)."""

    def start_node(self, name: str) -> None:
        """Start a killed node again."""

    def staged_files(self, name: str, folder: str, files: dict[str, bytes]) -> AbstractContextManager[None]:
        """While the context lasts, `files` (paths relative to `folder`) are on node `name`, readable by every user;
        after it, what they replaced is put back."""

    def kill_processes(self, name: str, pattern: str) -> None:
        """Kill (SIGKILL, as root) node `name`'s processes whose command line matches the extended regular
        expression `pattern`, as a fault kills a rank."""


class AccountingExportError(RuntimeError):
    """destroy could not export the accounting history: nothing was removed."""

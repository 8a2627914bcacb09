"""The stack's stopped nodes on Google Cloud, which `up` starts.

A spot node Google preempts is stopped, not deleted (instanceTerminationAction STOP, nodes.py): it keeps its name,
boot disk and place in Slurm, and stays TERMINATED until someone starts it (Compute Engine: "Spot VMs ... are
stopped ... you can restart them"). The budget's hard stop, TTL and idle rule stop nodes the same way. `up` lists
the stack's instances by its labels (the stop function's filter) and starts each TERMINATED one (instances.start).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp import storage
from goldenenv.clouds.stores import PROJECT_TAG_KEY
from goldenenv.spec import STACK_TAG_KEY

COMPUTE_URL = storage.COMPUTE_URL
STOPPED = "TERMINATED"
"""Compute Engine's status of a stopped instance (instances.get: PROVISIONING ... RUNNING, STOPPING, TERMINATED)."""


class LiveStoppedNodes:
    """The stack's TERMINATED instances in the project, all zones (instances.aggregatedList), and instances.start."""

    def __init__(self, gcp_project: str, project: str, stack: str, token_fn: Callable[[], str] | None = None,
                 rest: Callable[..., dict[str, Any]] = storage.call, base_url: str = COMPUTE_URL):
        self.gcp_project, self.project, self.stack = gcp_project, project, stack
        self._token_fn, self._rest, self.base_url = token_fn or storage.access_token, rest, base_url.rstrip("/")
        self._zones: dict[str, str] = {}

    def _instances(self) -> list[dict[str, Any]]:
        stack_key, project_key = gcp_labels.label_key(STACK_TAG_KEY), gcp_labels.label_key(PROJECT_TAG_KEY)
        query = {"filter": f'(labels.{stack_key} = "{gcp_labels.label_value(self.stack)}") '
                           f'(labels.{project_key} = "{gcp_labels.label_value(self.project)}")'}
        found, token = [], None
        while True:
            page = self._rest("GET", f"{self.base_url}/projects/{self.gcp_project}/aggregated/instances?"
                              + urllib.parse.urlencode({**query, **({"pageToken": token} if token else {})}),
                              self._token_fn())
            for scoped in (page.get("items") or {}).values():
                found += (scoped.get("instances") or []) if isinstance(scoped, dict) else []
            token = page.get("nextPageToken")
            if not token:
                return found

    def stopped(self) -> list[str]:
        names = []
        for instance in self._instances():
            if instance.get("status") == STOPPED:
                self._zones[instance["name"]] = str(instance.get("zone") or "").rsplit("/", 1)[-1]
                names.append(instance["name"])
        return sorted(names)

    def start(self, names: list[str]) -> None:
        for name in names:
            self._rest("POST", f"{self.base_url}/projects/{self.gcp_project}/zones/{self._zones[name]}/instances/"
                       f"{name}/start", self._token_fn())

"""The stack's deallocated VMs on Azure, which `up` starts.

A spot VM Azure evicts is deallocated in place (evictionPolicy Deallocate, nodes.py): it keeps its OS disk, its
instance id and its place in the scale set's placement group. The scale set's Try & restore (spotRestorePolicy)
starts it again when capacity returns within its timeout; after that, and for VMs the budget's function
deallocated, it stays deallocated until someone starts it. `up` lists the compute group's scale sets' VMs and its
head VM with their power state and starts each deallocated one (virtualMachineScaleSets start with the instances'
ids; virtualMachines start).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

from goldenenv.clouds.azure import storage

COMPUTE_API = "2024-07-01"
DEALLOCATED = frozenset({"PowerState/deallocated", "PowerState/stopped"})
"""Power states of a VM that stays down until started (learn.microsoft.com virtual-machines/states-billing)."""


def power_states(view: dict[str, Any] | None) -> set[str]:
    return {str(s.get("code")) for s in (view or {}).get("statuses") or [] if str(s.get("code", "")).startswith(
        "PowerState/")}


class LiveStoppedNodes:
    """The compute group's deallocated scale-set VMs (`<scale set>/<instance id>`) and VMs, and their start."""

    def __init__(self, subscription: str, group: str, token_fn: Callable[[], str] | None = None,
                 rest: Callable[..., dict[str, Any]] = storage.call, base_url: str = storage.ARM_URL):
        self.subscription, self.group = subscription, group
        self._token_fn, self._rest, self.base_url = token_fn or storage.arm_token, rest, base_url.rstrip("/")

    def _url(self, path: str, **query: str) -> str:
        group = urllib.parse.quote(self.group, safe="")
        return (f"{self.base_url}/subscriptions/{self.subscription}/resourceGroups/{group}/providers/"
                f"Microsoft.Compute/{path}?" + urllib.parse.urlencode({"api-version": COMPUTE_API, **query}))

    def _list(self, url: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        while url:
            try:
                page = self._rest("GET", url, self._token_fn())
            except storage.ArmError as e:
                if e.status == 404:  # no compute group yet: nothing to start
                    return found
                raise
            found += page.get("value") or []
            url = page.get("nextLink") or ""
        return found

    def stopped(self) -> list[str]:
        names = []
        for scale_set in self._list(self._url("virtualMachineScaleSets")):
            for vm in self._list(self._url(f"virtualMachineScaleSets/{scale_set['name']}/virtualMachines",
                                           **{"$expand": "instanceView"})):
                view = (vm.get("properties") or {}).get("instanceView")
                if power_states(view) & DEALLOCATED:
                    names.append(f"{scale_set['name']}/{vm.get('instanceId')}")
        for vm in self._list(self._url("virtualMachines", statusOnly="true")):
            if power_states((vm.get("properties") or {}).get("instanceView")) & DEALLOCATED:
                names.append(str(vm["name"]))
        return names

    def start(self, names: list[str]) -> None:
        sets: dict[str, list[str]] = {}
        for name in names:
            scale_set, _, instance = name.partition("/")
            if instance:
                sets.setdefault(scale_set, []).append(instance)
            else:
                self._rest("POST", self._url(f"virtualMachines/{name}/start"), self._token_fn())
        for scale_set, instances in sets.items():
            self._rest("POST", self._url(f"virtualMachineScaleSets/{scale_set}/start"), self._token_fn(),
                       {"instanceIds": instances})

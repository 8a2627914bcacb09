"""How an Azure VM learns of its eviction, as goldenenv-spotwatch reads it: a Preempt or Terminate scheduled event
naming this VM.

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.spotwatch loads this file by discovery
(from goldenenv/clouds/azure/, or bundled into the golden image's watcher) and hands itself to `notice` as `core`;
`notice` says (action, deadline or None, what the endpoint said) or None, and the watcher adds whose it is.
Sources: Azure "Instance Metadata Service" and "Scheduled Events for Linux VMs": every request carries Metadata: true
(else 400), none carries X-Forwarded-For; a scale set's events list the VMs they concern, by name (compute/name:
<scale set>_<instance id>). DMI board/sys vendor "Microsoft Corporation" (cloud-init's tools/hook-dhclient tests it
to tell an Azure VM).
"""

import json

VENDOR = "Microsoft Corporation"
"""How the machine's DMI sys_vendor begins on Azure."""
METADATA_URL = "http://169.254.169.254"
NOTICE_PATH = "/metadata/scheduledevents?api-version=2020-07-01"
TOKEN_HEADERS = None
"""No session token: the fixed header below instead."""
HEADERS = {"Metadata": "true"}
MACHINE_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
"""Where IMDS names this VM (text): a scale set's placement group shares its events, so a notice must name it."""
AZURE_EVICTIONS = {"Preempt": "preempt", "Terminate": "terminate"}
"""The scheduled events that take an Azure VM away for good, and the action a notice names ("Scheduled Events for
Linux VMs": Preempt, "the Spot Virtual Machine is being deleted", at least 30 s ahead; Terminate, "the virtual
machine is scheduled to be deleted", 5 to 15 minutes ahead where the scale set enables terminate notifications).
Freeze (a pause of seconds, memory kept), Reboot and Redeploy (the VM comes back) are maintenance, not an
interruption the watcher checkpoints for."""


def notice(body, machine, core):
    """scheduledevents: {"DocumentIncarnation", "Events": [{"EventId", "EventType", "Resources": [VM names],
    "EventStatus": "Scheduled"|"Started", "NotBefore": RFC 1123 or "" once started, ...}]}. A notice is a Preempt or
    Terminate whose Resources name this VM; other VMs' events (the rest of the placement group's), and maintenance
    that keeps the VM, are none."""
    try:
        events = json.loads(body).get("Events") or []
    except (ValueError, AttributeError):
        raise core.MetadataError(f"scheduled events unreadable: {body.strip()[:200]!r}") from None
    me = (machine or "").casefold()
    for event in events:
        action = AZURE_EVICTIONS.get(event.get("EventType")) if isinstance(event, dict) else None
        if action and me in (str(r).casefold() for r in event.get("Resources") or []):
            raw = json.dumps({k: event.get(k) for k in ("EventId", "EventType", "EventStatus", "NotBefore")
                              if k in event})
            return action, core.parse_http_date(str(event.get("NotBefore") or "")), raw
    return None

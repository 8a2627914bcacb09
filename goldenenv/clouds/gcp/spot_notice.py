"""How a Compute Engine node learns of its preemption, as goldenenv-spotwatch reads it: instance/preempted.

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.spotwatch loads this file by discovery
(from goldenenv/clouds/gcp/, or bundled into the golden image's watcher) and hands itself to `notice` as `core`;
`notice` says (action, deadline or None, what the endpoint said) or None, and the watcher adds whose it is.
Sources: Compute Engine "View and query VM metadata" (every request carries Metadata-Flavor: Google, else 403),
"Spot VMs" (the preemption process) and "Create and use Spot VMs" (detect the preemption of a Spot VM).
"""

from datetime import datetime, timedelta, timezone

VENDOR = "Google"
"""How the machine's DMI sys_vendor begins on Compute Engine."""
METADATA_URL = "http://metadata.google.internal"
NOTICE_PATH = "/computeMetadata/v1/instance/preempted"
TOKEN_HEADERS = None
"""No session token: the fixed header below instead."""
HEADERS = {"Metadata-Flavor": "Google"}
MACHINE_PATH = None
"""The notice is always this machine's."""
GCP_NOTICE_S = 30
"""Google Cloud's warning: a preempted Spot VM gets about 30 s (its ACPI G2 Soft Off) before it stops, and
instance/preempted reads TRUE from the notice on. AWS and Alibaba post the deadline itself."""


def notice(body, machine, core):
    """instance/preempted: TRUE once Google preempts the VM (it stops about GCP_NOTICE_S later), FALSE before."""
    if body.strip().upper() != "TRUE":
        return None
    deadline = datetime.now(timezone.utc) + timedelta(seconds=GCP_NOTICE_S)
    return "preempt", deadline.replace(microsecond=0), body.strip()

"""How an EC2 node learns of its spot interruption, as goldenenv-spotwatch reads it: IMDSv2's spot/instance-action.

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.spotwatch loads this file by discovery
(from goldenenv/clouds/aws/, or bundled into the golden image's watcher) and hands itself to `notice` as `core`;
`notice` says (action, deadline or None, what the endpoint said) or None, and the watcher adds whose it is.
Sources: EC2 User Guide, "Use the Instance Metadata Service to access instance metadata" (IMDSv2's session token)
and "Spot Instance interruption notices" (spot/instance-action).
"""

import json

VENDOR = "Amazon EC2"
"""How the machine's DMI sys_vendor begins on EC2."""
METADATA_URL = "http://169.254.169.254"
NOTICE_PATH = "/latest/meta-data/spot/instance-action"
TOKEN_HEADERS = ("X-aws-ec2-metadata-token-ttl-seconds", "X-aws-ec2-metadata-token")
"""(TTL header of the token PUT, header that carries the token): IMDSv2."""
HEADERS = {}
MACHINE_PATH = None
"""The notice is always this machine's."""


def notice(body, machine, core):
    """spot/instance-action: {"action": "terminate|stop|hibernate", "time": "<UTC ISO 8601>"}."""
    try:
        action = json.loads(body)
        return str(action.get("action", "terminate")), core.parse_time(str(action.get("time", ""))), body.strip()
    except (ValueError, AttributeError):
        return "terminate", None, body.strip()

"""How an ECS node learns of its spot release, as goldenenv-spotwatch reads it: the metadata service's
instance/spot/termination-time.

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.spotwatch loads this file by discovery
(from goldenenv/clouds/alicloud/, or bundled into the golden image's watcher) and hands itself to `notice` as `core`;
`notice` says (action, deadline or None, what the endpoint said) or None, and the watcher adds whose it is.
Sources: ECS "Instance metadata" (hardened mode's token; the service at 100.100.100.200) and "Preemptible instances"
(spot/termination-time).
"""

VENDOR = "Alibaba Cloud"
"""How the machine's DMI sys_vendor begins on ECS."""
METADATA_URL = "http://100.100.100.200"
"""ECS's metadata service (the address templates/node/munge-key-alicloud.sh.j2 and cpfs-mount.sh.j2 read): an
Alibaba node that watched 169.254.169.254 would never see its notice."""
NOTICE_PATH = "/latest/meta-data/instance/spot/termination-time"
TOKEN_HEADERS = ("X-aliyun-ecs-metadata-token-ttl-seconds", "X-aliyun-ecs-metadata-token")
"""(TTL header of the token PUT, header that carries the token): hardened mode."""
HEADERS = {}
MACHINE_PATH = None
"""The notice is always this machine's."""


def notice(body, machine, core):
    """spot/termination-time: the UTC time of the release."""
    return "terminate", core.parse_time(body), body.strip()

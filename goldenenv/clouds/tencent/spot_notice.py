"""How a CVM node learns of its spot reclaim, as goldenenv-spotwatch reads it: the metadata service's
spot/termination-time.

Standard library only, Python 3.8+, and no import of goldenenv: goldenenv.spotwatch loads this file by discovery
(from goldenenv/clouds/tencent/, or bundled into the golden image's watcher) and hands itself to `notice` as `core`;
`notice` says (action, deadline or None, what the endpoint said) or None, and the watcher adds whose it is.
Source: Tencent Cloud "Spot instances: reclaim notice" (https://www.tencentcloud.com/document/product/213/32487,
2024-01-08): `curl metadata.tencentyun.com/latest/meta-data/spot/termination-time` answers e.g.
`2018-08-18 12:05:33`, "the OS time of the spot instance when it's terminated (in UTC+8)", and 404 when the instance
is not spot or not being reclaimed (the watcher reads a 404 as no notice).
"""

from datetime import datetime, timedelta, timezone

VENDOR = "Tencent Cloud"
"""How the machine's DMI sys_vendor begins on CVM (unverified: read on no Tencent page)."""
METADATA_URL = "http://metadata.tencentyun.com"
"""CVM's metadata service by its documented name (the address 169.254.0.23 is not on a page read)."""
NOTICE_PATH = "/latest/meta-data/spot/termination-time"
TOKEN_HEADERS = None
"""No session token: the service answers plain GETs."""
HEADERS = {}
MACHINE_PATH = None
"""The notice is always this machine's."""
TENCENT_TIME = timezone(timedelta(hours=8))
"""The notice's time zone, UTC+8, whatever the node's own."""


def notice(body, machine, core):
    """spot/termination-time: `YYYY-MM-DD HH:MM:SS` in UTC+8, read as that moment in UTC."""
    text = body.strip()
    try:
        moment = datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=TENCENT_TIME)
    except ValueError:
        return "terminate", core.parse_time(text), text
    return "terminate", moment.astimezone(timezone.utc), text

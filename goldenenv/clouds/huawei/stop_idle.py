"""The stop function's idle judge of an ECS server: Cloud Eye's CPU over the stack's idle time.

A server is idle when Cloud Eye's cpu_util (namespace SYS.ECS, dimension instance_id; basic monitoring measured by
the host with no agent on the node: unverified) stayed under min(5 %, half a core: stopcore.idle_cpu_percent) in
every 5-minute mean of the last GOLDENENV_IDLE_MINUTES. The call is ShowMetricData, GET /V1.0/{project_id}/
metric-data with namespace, metric_name, dim.0=instance_id,<id>, from and to in ms, period 300 and filter average
(https://support.huaweicloud.com/intl/en-us/api-ces/ces_03_0033.html); the answer's datapoints[] of average and
timestamp are unverified (the page's response section was not read). As on the other clouds, missing or too few
points are not idleness, and a server up for less than the idle time is kept. The agency reads it with
ces:metricData:list, granted only to a stack with an idle time (privilege.py).

Standard library only, shipped beside stop.py and stopcore.py.
"""

import urllib.parse
from datetime import timedelta

try:
    import stopcore
except ImportError:  # in the repository
    from goldenenv.clouds import stopcore

CPU_NAMESPACE, CPU_METRIC, PERIOD_SECONDS = "SYS.ECS", "cpu_util", 300


def cpu_means(server_id, minutes, now, api, clock, region, transient):
    """The server's 5-minute mean cpu_util (percent) over the last ``minutes``, oldest first."""
    end = int(now.timestamp() * 1000)
    query = urllib.parse.urlencode({"namespace": CPU_NAMESPACE, "metric_name": CPU_METRIC,
                                    "dim.0": f"instance_id,{server_id}", "from": end - int(minutes * 60000),
                                    "to": end, "period": PERIOD_SECONDS, "filter": "average"})
    answer = stopcore.retry(lambda: api("GET", f"ces.{region}.myhuaweicloud.com",
                                        "/V1.0/{project}/metric-data?" + query, None), transient, clock)
    points = sorted(answer.get("datapoints") or [], key=lambda p: p.get("timestamp") or 0)
    return [p.get("average") for p in points]


def idle_reason(server, started, minutes, now, api, clock, region, transient):
    """Why a server created at ``started`` is idle; None when it is not, or cannot be known yet (up for less than
    the idle time, too few points). An unreadable metric raises."""
    if now - started < timedelta(minutes=minutes):
        return None
    vcpus = str((server.get("flavor") or {}).get("vcpus") or "1")
    threshold = stopcore.idle_cpu_percent(int(vcpus) if vcpus.isdigit() else 1)
    reason = stopcore.idle_due(cpu_means(server["id"], minutes, now, api, clock, region, transient), minutes,
                               PERIOD_SECONDS / 60, threshold, " %")
    return f"{reason} ({vcpus} vCPUs)" if reason else None

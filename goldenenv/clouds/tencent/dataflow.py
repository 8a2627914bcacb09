"""The CFS Turbo <-> COS data flow: an API (cfs 2019-07-19 CreateDataFlow, DescribeDataFlow, ModifyDataFlow,
DeleteDataFlow), with no resource in tencentcloud-iac-pulumi 0.2.3 nor in terraform-provider-tencentcloud at HEAD, so
a Pulumi dynamic resource over tencentcloud-sdk-python (cfs 3.1.189, installed by the tencent extra), and the export
destroy runs before anything is deleted (CreateLifecycleDataTask Type archive: Turbo -> COS) and the restore after an
adopting up (Type restore: COS -> Turbo).

A data flow holds an API key pair of its own (CreateDataFlowRequest SecretId/SecretKey): the provider reads the
caller's from the environment when it creates the flow, never from the program's inputs, so the pair is in no
Pulumi state, no plan and no log. The SDK is imported inside the provider's methods only: a plan under Pulumi's mocks
never loads it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi.dynamic

CFS_VERSION = "2019-07-19"
SOURCE_STORAGE_TYPE = "S3_COS"
TARGET_ROOT = "/cfs/"
"""A flow's TargetPath starts with /cfs/: a path inside the file system, not the mount point (CreateDataFlow)."""
ARCHIVE, RESTORE = "archive", "restore"
"""CreateLifecycleDataTask Type: archive (沉降, Turbo -> COS), restore (预热, COS -> Turbo)."""
DONE, FAILED = ("completed", "success", "finished"), ("failed", "fail", "error")
"""DescribeLifecycleDataTask task status words read as done or failed (their exact set: unverified)."""


class ExportFailed(RuntimeError):
    """The export to the bucket did not finish: destroy must not go on."""


def _client(region: str) -> Any:
    from tencentcloud.cfs.v20190719 import cfs_client
    from tencentcloud.common import credential

    secret_id, secret_key = os.environ.get("TENCENTCLOUD_SECRET_ID"), os.environ.get("TENCENTCLOUD_SECRET_KEY")
    if not secret_id or not secret_key:
        raise RuntimeError("the CFS data flow needs TENCENTCLOUD_SECRET_ID and TENCENTCLOUD_SECRET_KEY (the flow keeps "
                           "a key pair of its own to reach the bucket)")
    token = os.environ.get("TENCENTCLOUD_SECURITY_TOKEN") or None
    return cfs_client.CfsClient(credential.Credential(secret_id, secret_key, token), region)


def _call(region: str, action: str, params: dict[str, Any]) -> dict[str, Any]:
    import json

    from tencentcloud.cfs.v20190719 import models

    request = getattr(models, f"{action}Request")()
    request.from_json_string(json.dumps(params))
    return json.loads(getattr(_client(region), action)(request).to_json_string())


class DataFlowProvider(pulumi.dynamic.ResourceProvider):
    """create/read/update/delete of one data flow; inputs: region, fileSystemId, bucketAddress, sourcePath,
    targetPath, name."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        params = {"FileSystemId": props["fileSystemId"], "SourceStorageType": SOURCE_STORAGE_TYPE,
                  "SourceStorageAddress": props["bucketAddress"], "SourcePath": props["sourcePath"],
                  "TargetPath": props["targetPath"], "DataFlowName": props["name"], "AutoRefresh": 0,
                  "SecretId": os.environ.get("TENCENTCLOUD_SECRET_ID", ""),
                  "SecretKey": os.environ.get("TENCENTCLOUD_SECRET_KEY", "")}
        answer = _call(props["region"], "CreateDataFlow", params)
        return pulumi.dynamic.CreateResult(answer["DataFlowId"], {**props, "dataFlowId": answer["DataFlowId"]})

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        answer = _call(props["region"], "DescribeDataFlow", {"FileSystemId": props["fileSystemId"],
                                                             "DataFlowId": id_})
        flows = answer.get("DataFlows") or []
        return pulumi.dynamic.ReadResult(id_ if flows else None, {**props, "status": flows[0].get("Status")}
                                         if flows else props)

    def diff(self, id_: str, old: dict[str, Any], new: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = [k for k in ("region", "fileSystemId", "bucketAddress", "sourcePath", "targetPath")
                    if old.get(k) != new.get(k)]
        changes = bool(replaces) or old.get("name") != new.get("name")
        return pulumi.dynamic.DiffResult(changes=changes, replaces=replaces, delete_before_replace=True)

    def update(self, id_: str, old: dict[str, Any], new: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        _call(new["region"], "ModifyDataFlow", {"FileSystemId": new["fileSystemId"], "DataFlowId": id_,
                                                "DataFlowName": new["name"]})
        return pulumi.dynamic.UpdateResult({**new, "dataFlowId": id_})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        _call(props["region"], "DeleteDataFlow", {"FileSystemId": props["fileSystemId"], "DataFlowId": id_})


class DataFlow(pulumi.dynamic.Resource):
    """The stack's CFS Turbo file system linked to its bucket (type pulumi-python:dynamic:Resource)."""

    data_flow_id: pulumi.Output[str]

    def __init__(self, name: str, *, region: str, file_system_id: pulumi.Input[str],
                 bucket_address: pulumi.Input[str], source_path: str, target_path: str,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(DataFlowProvider(), name, {
            "region": region, "fileSystemId": file_system_id, "bucketAddress": bucket_address,
            "sourcePath": source_path, "targetPath": target_path, "name": name[:64], "dataFlowId": None,
        }, opts)


def run_task(region: str, fs_id: str, flow_id: str, kind: str, path: str, log: Callable[[str], None],
             call: Callable[[str, str, dict[str, Any]], dict[str, Any]] | None = None,
             poll_s: float = 30, timeout_s: float = 6 * 3600, sleep: Callable[[float], None] = time.sleep) -> None:
    """One lifecycle task over the data flow (archive: export to the bucket; restore: load from it), waited for;
    ExportFailed when it fails or does not end in time."""
    call = call or (lambda r, a, p: _call(r, a, p))
    task = call(region, "CreateLifecycleDataTask", {"FileSystemId": fs_id, "Type": kind, "DataFlowId": flow_id,
                                                    "TaskName": f"goldenenv-{kind}", "TaskPath": path,
                                                    "IsOverwrite": True})["TaskId"]
    log(f"{kind} task {task} on {fs_id} ({path}) started")
    waited = 0.0
    while waited <= timeout_s:
        tasks = call(region, "DescribeLifecycleDataTask", {"TaskId": task, "CfsVersion": "v4.0"}).get("TaskInfo") or []
        status = str((tasks[0] if tasks else {}).get("TaskStatus") or "").lower()
        if status in DONE:
            log(f"{kind} task {task} finished")
            return
        if status in FAILED:
            raise ExportFailed(f"{kind} task {task} on {fs_id} failed ({status})")
        sleep(poll_s)
        waited += poll_s
    raise ExportFailed(f"{kind} task {task} on {fs_id} did not finish in {timeout_s / 3600:g} h")

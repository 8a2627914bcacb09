"""Before `destroy`: export what CPFS holds to the bucket through the stack's data flow, and wait.

A file written on CPFS reaches OSS only through a data flow export task: the data flow links the fileset to the
bucket, but does not write files back by itself, and the file system is deleted with the stack. So `destroy`
first creates an export task on the stack's data flow (NAS OpenAPI 2017-06-26 `CreateDataFlowTask`, TaskAction
Export, DataType MetaAndData, Directory the fileset's path), polls `DescribeDataFlowTasks` until it ends, logging
progress, and stops with ExportFailed unless it completed with every file: nothing is deleted then.

The calls are signed RPC requests (guard.rpc_client, standard library only) to the region's NAS endpoint. Names
checked against Alibaba's NAS API reference and the NAS SDK models (alibabacloud nas-20170626: CreateDataFlowTask
request, DescribeDataFlowTasks request Filters.N.Key / Value and response TaskInfo.Task[] with Status and
ProgressStats): FileSystemId and DataFlowId are required, TaskAction Export, DataType MetaAndData, Filters key
TaskIds, task statuses Pending | Executing | Failed | Completed | Canceling | Canceled. Unverified (no account to try
them on): that a task on the fileset's root directory exports the whole fileset; that a clean export ends with
FilesDone equal to FilesTotal; the error code of a file system that no longer exists (InvalidFileSystem.NotFound).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from goldenenv.clouds.alicloud import guard

NAS_VERSION = "2017-06-26"
EXPORT = "Export"
META_AND_DATA = "MetaAndData"
"""The files' metadata and their data blocks: the whole file reaches the bucket."""
COMPLETED = "Completed"
DONE = frozenset({COMPLETED, "Failed", "Canceled"})
POLL_SECONDS = 15.0
TIMEOUT_SECONDS = 6 * 3600
FILE_SYSTEM_GONE = "InvalidFileSystem.NotFound"
"""What NAS answers for a file system that no longer exists (unverified): nothing is left to export."""


def nas_endpoint(region: str) -> str:
    return f"nas.{region}.aliyuncs.com"


def nas_client(region: str, credentials: guard.Credentials) -> guard.Call:
    """NAS OpenAPI calls for the region, signed with the caller's credentials."""
    return guard.rpc_client(nas_endpoint(region), NAS_VERSION, credentials)


class ExportFailed(RuntimeError):
    """The export of CPFS to the bucket did not complete: destroying the file system now would lose files."""


@dataclass(frozen=True)
class ExportResult:
    task_id: str
    files_total: int
    files_done: int
    bytes_done: int
    seconds: float


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB"


def _task(nas: guard.Call, file_system_id: str, task_id: str) -> dict[str, Any]:
    answer = nas("DescribeDataFlowTasks", {"FileSystemId": file_system_id, "Filters.1.Key": "TaskIds",
                                           "Filters.1.Value": task_id})
    for task in (answer.get("TaskInfo") or {}).get("Task") or []:
        if task.get("TaskId") == task_id:
            return task
    raise ExportFailed(f"export {task_id} of {file_system_id} is not among the file system's data flow tasks")


def export_fileset(file_system_id: str, data_flow_id: str, directory: str, nas: guard.Call,
                   log: Callable[[str], None] = print, poll_seconds: float | None = None,
                   timeout_seconds: float | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> ExportResult:
    """Export every file of the data flow's fileset (`directory`, its path on CPFS) to the bucket and wait.

    Raises ExportFailed if the task cannot start, fails, is cancelled, ends with files not done, or outlives
    timeout_seconds; the caller then deletes nothing.
    """
    poll_seconds = POLL_SECONDS if poll_seconds is None else poll_seconds
    timeout_seconds = TIMEOUT_SECONDS if timeout_seconds is None else timeout_seconds
    started = time.monotonic()
    try:
        created = nas("CreateDataFlowTask", {
            "FileSystemId": file_system_id, "DataFlowId": data_flow_id, "TaskAction": EXPORT,
            "DataType": META_AND_DATA, "Directory": directory,
        })
    except guard.ApiError as e:
        if e.code == FILE_SYSTEM_GONE:
            log(f"file system {file_system_id} no longer exists: nothing to export")
            return ExportResult("", 0, 0, 0, 0.0)
        raise ExportFailed(f"could not start the export of {file_system_id} (data flow {data_flow_id}) to its "
                           f"bucket: {e.code}: {e.message}") from None
    task_id = str(created.get("TaskId") or "")
    if not task_id:
        raise ExportFailed(f"the export of {file_system_id} to its bucket returned no task id")
    log(f"exporting {file_system_id} {directory} to its bucket (data flow {data_flow_id}, task {task_id})")
    while True:
        try:
            task = _task(nas, file_system_id, task_id)
        except guard.ApiError as e:
            raise ExportFailed(f"cannot follow export {task_id} of {file_system_id}: {e.code}: {e.message}") from None
        status = str(task.get("Status") or "Pending")
        stats = task.get("ProgressStats") or {}
        total, done = int(stats.get("FilesTotal") or 0), int(stats.get("FilesDone") or 0)
        bytes_total, bytes_done = int(stats.get("BytesTotal") or 0), int(stats.get("BytesDone") or 0)
        log(f"export {task_id}: {status.lower()}, {done:,} of {total:,} files ({_gib(bytes_done)} of "
            f"{_gib(bytes_total)}) exported")
        if status in DONE:
            break
        if time.monotonic() - started > timeout_seconds:
            raise ExportFailed(f"export {task_id} of {file_system_id} still {status.lower()} after "
                               f"{timeout_seconds / 3600:g} h")
        sleep(poll_seconds)
    if status != COMPLETED or done < total:
        why = task.get("ErrorMsg") or f"{total - done:,} of {total:,} files not exported"
        raise ExportFailed(f"export {task_id} of {file_system_id} ended {status.lower()}: {why}")
    return ExportResult(task_id, total, done, bytes_done, time.monotonic() - started)

"""The SFS Turbo <-> OBS link: SFS Turbo's backend target (sfsturbo v1 CreateBackendTarget, ShowBackendTargetInfo,
UpdateObsTargetPolicy, DeleteBackendTarget), with no resource in pulumi-huaweicloud 0.0.12 (terraform-provider-
huaweicloud added huaweicloud_sfs_turbo_obs_target later), so a Pulumi dynamic resource over huaweicloudsdksfsturbo
3.1.219 (installed by the huawei extra), and the export destroy runs before anything is deleted (an hpc-cache task of
type export over the linked folder, polled until SUCCESS or FAIL: docs/research/huawei.md §2.2).

The target auto-exports new and changed files (AutoExportPolicy events NEW and CHANGED; DELETED is left out, so a
file removed from the file system stays in the bucket). The link takes only OBS buckets, not parallel file systems,
and Huawei's console guide says a bucket with server-side encryption cannot be linked (unverified against the API:
docs/research/huawei.md §2.2). The SDK is imported inside the provider's methods only: a plan under Pulumi's mocks
never loads it; the caller's credentials come from the variables huaweicloudsdkcore reads, never from the program.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi.dynamic

EVENTS = ("NEW", "CHANGED")
LINKED_FOLDER = "goldenenv"
"""The file system's top-level folder linked to the bucket (file_system_path: a new folder name, at most 63
characters, no `/`)."""
DONE, FAILED = "SUCCESS", "FAIL"
"""An hpc-cache task's terminal states (terraform-provider-huaweicloud's sfs_turbo_data_task treats both as finished)."""


class ExportFailed(RuntimeError):
    """The export to the bucket did not finish: destroy must not go on."""


def _client(region: str) -> Any:
    from huaweicloudsdkcore.auth.credentials import BasicCredentials
    from huaweicloudsdksfsturbo.v1 import SFSTurboClient
    from huaweicloudsdksfsturbo.v1.region.sfsturbo_region import SFSTurboRegion

    from goldenenv.clouds.huawei import api

    found = api.credentials_from_env()
    credentials = BasicCredentials(found.access_key, found.secret_key)
    if found.token:
        credentials = credentials.with_security_token(found.token)
    return SFSTurboClient.new_builder().with_credentials(credentials).with_region(
        SFSTurboRegion.value_of(region)).build()


def _models() -> Any:
    from huaweicloudsdksfsturbo.v1 import model

    return model


class BackendTargetProvider(pulumi.dynamic.ResourceProvider):
    """create/read/update/delete of one backend target; inputs: region, shareId, bucket, endpoint, folder."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        m = _models()
        body = m.CreateBackendTargetRequestBody(file_system_path=props["folder"], obs=m.ObsDataRepository(
            bucket=props["bucket"], endpoint=props["endpoint"], policy=m.ObsDataRepositoryPolicy(
                auto_export_policy=m.AutoExportPolicy(events=list(EVENTS)))))
        answer = _client(props["region"]).create_backend_target(
            m.CreateBackendTargetRequest(share_id=props["shareId"], body=body))
        return pulumi.dynamic.CreateResult(answer.target_id, {**props, "targetId": answer.target_id,
                                                              "lifecycle": answer.lifecycle})

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException

        m = _models()
        try:
            answer = _client(props["region"]).show_backend_target_info(
                m.ShowBackendTargetInfoRequest(share_id=props["shareId"], target_id=id_))
        except ClientRequestException as e:
            if e.status_code == 404:
                return pulumi.dynamic.ReadResult(None, props)
            raise
        return pulumi.dynamic.ReadResult(id_, {**props, "lifecycle": answer.lifecycle})

    def diff(self, id_: str, old: dict[str, Any], new: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = [k for k in ("region", "shareId", "bucket", "endpoint", "folder") if old.get(k) != new.get(k)]
        return pulumi.dynamic.DiffResult(changes=bool(replaces) or old.get("events") != new.get("events"),
                                         replaces=replaces, delete_before_replace=True)

    def update(self, id_: str, old: dict[str, Any], new: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        m = _models()
        _client(new["region"]).update_obs_target_policy(m.UpdateObsTargetPolicyRequest(
            share_id=new["shareId"], target_id=id_, body=m.UpdateObsTargetPolicyRequestBody(
                policy=m.ObsDataRepositoryPolicy(auto_export_policy=m.AutoExportPolicy(events=list(EVENTS))))))
        return pulumi.dynamic.UpdateResult({**new, "targetId": id_})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """Unlink, keeping the files on both sides (delete_data_in_file_system false): the bucket is retained."""
        m = _models()
        _client(props["region"]).delete_backend_target(m.DeleteBackendTargetRequest(
            share_id=props["shareId"], target_id=id_, delete_data_in_file_system=False))


class BackendTarget(pulumi.dynamic.Resource):
    """The stack's SFS Turbo folder linked to its bucket (type pulumi-python:dynamic:Resource); its id is the
    target's."""

    def __init__(self, name: str, *, region: str, share_id: pulumi.Input[str], bucket: pulumi.Input[str],
                 endpoint: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__(BackendTargetProvider(), name, {
            "region": region, "shareId": share_id, "bucket": bucket, "endpoint": endpoint, "folder": LINKED_FOLDER,
            "events": list(EVENTS), "targetId": None, "lifecycle": None}, opts)


def obs_endpoint(region: str) -> str:
    """OBS's regional domain, as the backend target's endpoint takes it (obs.<region>.myhuaweicloud.com;
    unverified beyond the field's description 'OBS regional domain')."""
    return f"obs.{region}.myhuaweicloud.com"


Call = Callable[[str, str, dict[str, Any]], dict[str, Any]]
"""(region, operation, fields) -> the answer's fields: the SDK's calls, or a test's stand-in."""


def _sdk_call(region: str, operation: str, fields: dict[str, Any]) -> dict[str, Any]:
    m = _models()
    client = _client(region)
    if operation == "create_hpc_cache_task":
        answer = client.create_hpc_cache_task(m.CreateHpcCacheTaskRequest(
            share_id=fields["share_id"], body=m.CreateHpcCacheTaskReq(**fields["body"])))
    else:
        answer = client.show_hpc_cache_task(m.ShowHpcCacheTaskRequest(**fields))
    return answer.to_dict()


def export(region: str, share_id: str, log: Callable[[str], None], call: Call | None = None,
           poll_s: float = 30, timeout_s: float = 6 * 3600, sleep: Callable[[float], None] = time.sleep) -> None:
    """Export the linked folder to the bucket and wait; ExportFailed when the task fails or does not end in time."""
    call = call or _sdk_call
    task = call(region, "create_hpc_cache_task", {"share_id": share_id, "body": {
        "type": "export", "src_target": LINKED_FOLDER, "src_prefix": "", "dest_target": LINKED_FOLDER,
        "dest_prefix": ""}})["task_id"]
    log(f"export task {task} on SFS Turbo {share_id} ({LINKED_FOLDER}/) started")
    waited = 0.0
    while waited <= timeout_s:
        status = str(call(region, "show_hpc_cache_task", {"share_id": share_id, "task_id": task}).get("status"))
        if status == DONE:
            log(f"export task {task} finished")
            return
        if status == FAILED:
            raise ExportFailed(f"export task {task} on SFS Turbo {share_id} failed")
        sleep(poll_s)
        waited += poll_s
    raise ExportFailed(f"export task {task} on SFS Turbo {share_id} did not finish in {timeout_s / 3600:g} h")


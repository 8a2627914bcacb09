"""Tencent Cloud limits as data: what Tencent refuses only at `up`, each with where Tencent documents it."""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv.clouds.base import UserDataLimit


@dataclass(frozen=True)
class Limit:
    value: int
    source: str


INSTANCE = "tencentcloud:Instance/instance:Instance"
"""The type token of a CVM instance in tencentcloud-iac-pulumi 0.2.3 (nodes and head)."""

USER_DATA = UserDataLimit(
    16 * 1024 * 3 // 4, {INSTANCE: "userData"}, base64=True,
    source="https://cloud.tencent.com/document/api/213/15730 CVM RunInstances UserData (tencentcloud-sdk-python-cvm 3.1.178 RunInstancesRequest: \"需要以 base64 方式编码，"
           "支持的最大数据大小为 16KB\"; tencentcloud-iac-pulumi 0.2.3 instance.user_data: \"Must be base64 encoded and up "
           "to 16 KB\"): 16 KB of base64 carry 12 KB")
"""Every node and the head are CVM instances carrying cloud-init's user data, gzipped and base64-encoded (nodes.
user_data); Tencent's 16 KB is the encoded size, so the bytes the host receives are at most three quarters of it
(UserDataLimit counts those). The page URL is RunInstances' API reference; its text was read in the SDK (unverified
that 213/15730 is that page's number)."""

USER_DATA_BASE64 = Limit(16 * 1024, USER_DATA.source)

TURBO_MIN_GIB = {"TP": Limit(20480, "tencentcloud-iac-pulumi 0.2.3 cfs.FileSystem capacity (from terraform-provider-"
                                    "tencentcloud v1.82.42) and https://www.tencentcloud.com/document/product/582/9135: "
                                    "Turbo high-performance (TP) starts at 20 TiB"),
                 "TB": Limit(40960, "the same sources: Turbo standard (TB) starts at 40 TiB")}
"""The CFS Turbo minimums goldenenv holds a stack to. The current API text (tencentcloud-sdk-python-cfs 3.1.189
CreateCfsFileSystemRequest.Capacity) says 10 TiB (TP) and 20 TiB (TB): the sources conflict by site and date, so the
larger, which every source allows, is kept."""
TURBO_STEP_GIB = Limit(20480, "tencentcloud-iac-pulumi 0.2.3 cfs.FileSystem capacity: TB grows by 20,480 GiB, TP by "
                              "10,240 (the current API says 10 TiB steps for both): a multiple of 10,240 for TP")
TURBO_STEP_GIB_TP = 10240

HPC_CLUSTER_INSTANCES = Limit(100, "CVM DescribeHpcClusters (https://cloud.tencent.com/document/api/213/83220): "
                                   "CvmQuotaTotal 100 in the API example (an example value, unverified as every "
                                   "account's cap)")

SSM_SECRET_BYTES = Limit(4096, "tencentcloud-iac-pulumi 0.2.3 ssm.SecretVersion: a version holds at most 4096 bytes")

SCF_TIMEOUT_S = Limit(900, "tencentcloud-sdk-python-scf 3.1.100 CreateFunctionRequest.Timeout: 1 to 900 s")

STOP_BATCH = Limit(100, "tencentcloud-sdk-python-cvm 3.1.178 StopInstancesRequest.InstanceIds: at most 100 per call")

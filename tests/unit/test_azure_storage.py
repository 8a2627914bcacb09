"""Azure's data store (Blob storage account + Azure Managed Lustre), its lookups, archive, purge and mount script.

The component runs under the offline plan's recording monitor with storage.plan_mock. The values Azure takes are
written out here from Microsoft's documentation, not read from the code: AMLFS's SKUs, sizes and increments
(azure-managed-lustre amlfs-overview.md), its subnet sizes (amlfs-prerequisites.md), the archive API and the
archiveStatus shape (azure-rest-api-specs storagecache 2024-03-01 amlfilesystem.json and amlFilesystems_Get.json),
the built-in role ids (azure-docs built-in-roles.md) and the HPC Cache Resource Provider's application id.
"""

from __future__ import annotations

import re
import subprocess

import pulumi
import pytest

from goldenenv.clouds.azure import storage
from goldenenv.clouds.azure.storage import ArmError, Found, OfflineLookup
from goldenenv.nodeboot import SharedFs, ready_marker
from goldenenv.render import render
from goldenenv.spec import STACK_TAG_KEY, ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SUB = "3f2b6c1e-0d4a-4e55-9a61-7c0b1d2e3f40"
PROJECT, STACK = "llm-pretrain", "azure-ndh100-2node"
DATA_GROUP, COMPUTE_GROUP = "rg-llm-pretrain-azure-ndh100-2node-data", "rg-llm-pretrain-azure-ndh100-2node"
ACCOUNT = "azure-native:storage:StorageAccount"
CONTAINER = "azure-native:storage:BlobContainer"
SERVICE = "azure-native:storage:BlobServiceProperties"
POLICY = "azure-native:storage:ManagementPolicy"
LUSTRE = "azure-native:storagecache:AmlFilesystem"
ROLE = "azure-native:authorization:RoleAssignment"
VNET = f"/subscriptions/{SUB}/resourceGroups/{COMPUTE_GROUP}/providers/Microsoft.Network/virtualNetworks/vnet"
NODE_SUBNET, FS_SUBNET = f"{VNET}/subnets/compute", f"{VNET}/subnets/lustre"
RP_PRINCIPAL = "9d2c6a0b-1111-4c3e-8f00-5a5a5a5a5a5a"
NODE_PRINCIPAL = "0c0ffee0-2222-4c3e-8f00-6b6b6b6b6b6b"
TAGS = {STACK_TAG_KEY: STACK, "project": PROJECT, "cost-center": "ML-42"}
# anchors from Microsoft's public pages
STORAGE_ACCOUNT_CONTRIBUTOR = "17d1049b-9a84-46fb-8f53-869881c3d3ab"
STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
HPC_CACHE_APP = "4392ab71-2ce2-4b0d-8770-b352745c73f5"
ACCOUNT_NAME = re.compile(r"^[a-z0-9]{3,24}$")


# ---------------------------------------------------------------- sizes, tiers and subnets Azure takes

@pytest.mark.parametrize("size_gib,tier,sku", [
    (49_152, 40, "AMLFS-Durable-Premium-40"), (16_384, 125, "AMLFS-Durable-Premium-125"),
    (8_192, 250, "AMLFS-Durable-Premium-250"), (4_096, 500, "AMLFS-Durable-Premium-500"),
    (786_432, 40, "AMLFS-Durable-Premium-40"), (131_072, 500, "AMLFS-Durable-Premium-500"),
])
def test_sizes_azure_takes_pass(size_gib, tier, sku):
    assert storage.problems(True, size_gib, tier) == []
    assert storage.sku_of(tier).name == sku


@pytest.mark.parametrize("size_gib,tier,key,says", [
    (1_200, 250, "sizeGib", "8,192"),           # the spec's default is below every tier's minimum
    (8_000, 250, "sizeGib", "1 TiB = 1,024 GiB"),  # not a whole number of TiB
    (12_288, 250, "sizeGib", "8,192 or 16,384"),  # 12 TiB: not a multiple of the 8 TiB increment
    (4_096, 125, "sizeGib", "16,384"),
    (135_168, 500, "sizeGib", "131,072"),        # 132 TiB: above the 128 TiB maximum
    (16_384, 1000, "throughputPerTib", "40, 125, 250, 500"),
    (16_384, 200, "throughputPerTib", "AMLFS-Durable-Premium-250"),
])
def test_a_size_or_tier_azure_refuses_names_the_key_and_the_valid_values(size_gib, tier, key, says):
    [found] = storage.problems(True, size_gib, tier)
    assert found.startswith(f"goldenenv:storage.parallelFs.{key}: ") and says in found, found
    assert storage.problems(False, size_gib, tier) == []


class _Spec:
    def __init__(self, size_gib=8_192, tier=500, enabled=True, bucket_name=None, project=PROJECT, stack=STACK):
        self.stack = stack
        self.tags = type("Tags", (), {"project": project})()
        fs = type("Fs", (), {"enabled": enabled, "size_gib": size_gib, "throughput_per_tib": tier})()
        bucket = type("Bucket", (), {"bucket_name": bucket_name, "noncurrent_version_days": 30})()
        self.storage = type("Storage", (), {"parallel_fs": fs, "bucket": bucket})()


def test_spec_problems_name_the_keys():
    assert storage.spec_problems(_Spec()) == []
    [size] = storage.spec_problems(_Spec(size_gib=1_200, tier=250))
    assert size.key == "goldenenv:storage.parallelFs.sizeGib" and "8,192" in size.message
    [bucket] = storage.spec_problems(_Spec(bucket_name="my-data.bucket"))
    assert bucket.key == "goldenenv:storage.bucket.bucketName" and "3 to 24 lowercase letters and digits" in \
        bucket.message and "'mydatabucket'" in bucket.message


@pytest.mark.parametrize("size_gib,prefix", [(4_096, 27), (16_384, 27), (20_480, 26), (49_152, 25),
                                             (131_072, 24), (262_144, 23)])
def test_the_lustre_subnet_is_sized_by_microsofts_table(size_gib, prefix):
    assert storage.amlfs_subnet_prefix(size_gib) == prefix


# ---------------------------------------------------------------- names

def test_account_names_are_valid_stable_and_apart():
    name = storage.account_name(PROJECT, STACK, SUB)
    assert ACCOUNT_NAME.fullmatch(name) and name == storage.account_name(PROJECT, STACK, SUB)
    assert name.startswith("azurendh1002no")
    others = {storage.account_name(PROJECT, STACK, "other-sub"), storage.account_name("vision", STACK, SUB),
              storage.account_name(PROJECT, "Azure-NDH100-2node", SUB), storage.account_name(PROJECT, "---", SUB)}
    assert name not in others and len(others) == 4 and all(ACCOUNT_NAME.fullmatch(n) for n in others)


def test_the_data_group_is_the_compute_groups_name_plus_data():
    assert storage.data_group_name(PROJECT, STACK) == DATA_GROUP


# ---------------------------------------------------------------- the component under the offline plan's mocks

class MockCloud:
    plan_mock = staticmethod(storage.plan_mock)

    @staticmethod
    def plan_call(args):
        return None


def run_program(program):
    from goldenenv import plan

    return plan.record(program, MockCloud())


def args(**more) -> storage.DataStoreArgs:
    values = dict(
        data_group=DATA_GROUP, compute_group=COMPUTE_GROUP, location="eastus", zone="1",
        account_name=storage.account_name(PROJECT, STACK, SUB), adopt_account=None, noncurrent_version_days=30,
        parallel_fs=True, fs_size_gib=8_192, fs_throughput_per_tib=500, fs_subnet_id=FS_SUBNET,
        node_subnet_id=NODE_SUBNET, checkpoint_prefix="checkpoints/", mount_point="/fsx", tags=TAGS,
        subscription_id=SUB, hpc_cache_principal_id=RP_PRINCIPAL)
    values.update(more)
    return storage.DataStoreArgs(**values)


def outputs_of(store: storage.DataStore) -> dict:
    store.grant(f"{STACK}-gpu-blob", NODE_PRINCIPAL)
    return {"account": store.account_name, "container": store.container_name, "blob": store.blob_endpoint,
            "fs": store.fs_name, "mgs": store.mgs_address, "mount": store.mount, "command": store.mount_command}


def by_type(records, token):
    return [r for r in records if r.type == token]


def one(records, token):
    [found] = by_type(records, token)
    return found


@pytest.fixture(scope="module")
def planned():
    return run_program(lambda: outputs_of(storage.DataStore(f"{STACK}-data", args())))


def test_the_account_is_private_tls12_and_denies_other_networks(planned):
    records, outputs = planned
    account = one(records, ACCOUNT).props
    assert account["accountName"] == storage.account_name(PROJECT, STACK, SUB)
    assert account["resourceGroupName"] == DATA_GROUP and account["kind"] == "StorageV2"
    assert account["allowBlobPublicAccess"] is False
    assert account["minimumTlsVersion"] == "TLS1_2" and account["enableHttpsTrafficOnly"] is True
    rules = account["networkRuleSet"]
    assert rules["defaultAction"] == "Deny"
    assert {r["virtualNetworkResourceId"] for r in rules["virtualNetworkRules"]} == {NODE_SUBNET, FS_SUBNET}
    assert account["encryption"]["requireInfrastructureEncryption"] is True
    assert account["encryption"]["keySource"] == "Microsoft.Storage"
    assert account["isHnsEnabled"] is False  # versioning is not offered on HNS accounts
    assert account["allowSharedKeyAccess"] is True  # AMLFS's prerequisites, named as the reason
    assert account["sku"] == {"name": "Standard_ZRS"}
    assert account["tags"] == {**TAGS, "goldenenv-hardening-exception": "amlfs-shared-key"}
    assert outputs["blob"] == f"https://{account['accountName']}.blob.core.windows.net/"


def test_everything_in_the_data_group_survives_destroy_and_lustre_does_not(planned):
    records, _ = planned
    for token in (ACCOUNT, CONTAINER, SERVICE, POLICY):
        for record in by_type(records, token):
            assert record.retain_on_delete and not record.protect and record.import_id is None, record.name
            assert record.props["resourceGroupName"] == DATA_GROUP
    fs = one(records, LUSTRE)
    assert not fs.retain_on_delete and fs.props["resourceGroupName"] == COMPUTE_GROUP


def test_blobs_are_versioned_and_old_checkpoints_expire(planned):
    records, _ = planned
    service = one(records, SERVICE).props
    assert service["isVersioningEnabled"] is True and service["deleteRetentionPolicy"]["enabled"] is True
    [rule] = one(records, POLICY).props["policy"]["rules"]
    assert rule["enabled"] is True and rule["type"] == "Lifecycle"
    assert rule["definition"]["filters"] == {"blobTypes": ["blockBlob"], "prefixMatch": ["data/checkpoints/"]}
    assert rule["definition"]["actions"] == {"version": {"delete": {"daysAfterCreationGreaterThan": 30}}}


def test_two_private_containers_and_lustre_logs_to_the_other(planned):
    records, outputs = planned
    containers = {r.props["containerName"]: r for r in by_type(records, CONTAINER)}
    assert set(containers) == {"data", "lustre-logs"} and outputs["container"] == "data"
    assert all(c.props["publicAccess"] == "None" for c in containers.values())
    settings = one(records, LUSTRE).props["hsm"]["settings"]
    assert settings["container"] == containers["data"].id
    assert settings["loggingContainer"] == containers["lustre-logs"].id
    assert settings["container"] != settings["loggingContainer"]
    assert settings["container"].rsplit("/containers/", 1)[0] == settings["loggingContainer"].rsplit(
        "/containers/", 1)[0]  # the same account
    assert settings["importPrefixesInitial"] == ["/"]


def test_lustre_takes_the_sku_of_the_tier_and_tib_of_the_size(planned):
    records, outputs = planned
    fs = one(records, LUSTRE).props
    assert fs["sku"] == {"name": "AMLFS-Durable-Premium-500"} and fs["storageCapacityTiB"] == 8
    assert fs["filesystemSubnet"] == FS_SUBNET and fs["zones"] == ["1"] and fs["location"] == "eastus"
    assert re.fullmatch(r"([01]?[0-9]|2[0-3]):[0-5][0-9]", fs["maintenanceWindow"]["timeOfDayUTC"])
    assert fs["maintenanceWindow"]["dayOfWeek"] in {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
                                                    "Saturday", "Sunday"}
    assert re.fullmatch(r"[0-9a-zA-Z][-0-9a-zA-Z_]{0,78}[0-9a-zA-Z]", fs["amlFilesystemName"])
    assert fs["tags"] == TAGS
    mgs = outputs["mgs"]
    assert re.fullmatch(r"10\.42\.128\.\d+", mgs)
    mount = outputs["mount"]
    assert isinstance(mount, SharedFs) and mount.unit == "goldenenv-sharedfs.service"
    assert mount.script == "lustre-mount-azure.sh"
    assert mount.values == {"source_path": f"{mgs}@tcp:/lustrefs", "options": "noatime,flock"}
    assert outputs["command"] == f"mount -t lustre -o noatime,flock {mgs}@tcp:/lustrefs /fsx"


def test_the_resource_provider_holds_its_two_roles_before_lustre_is_created(planned, monkeypatch):
    records, _ = planned
    account = one(records, ACCOUNT)
    rp = [r for r in by_type(records, ROLE) if r.props["principalId"] == RP_PRINCIPAL]
    assert {r.props["roleDefinitionId"].rsplit("/", 1)[-1] for r in rp} == {STORAGE_ACCOUNT_CONTRIBUTOR,
                                                                             STORAGE_BLOB_DATA_CONTRIBUTOR}
    for role in rp:
        assert role.props["principalType"] == "ServicePrincipal"
        assert role.props["roleDefinitionId"].startswith(f"/subscriptions/{SUB}/providers/Microsoft.Authorization/")
        assert role.props["scope"] == account.id
        assert account.id.endswith(f"/storageAccounts/{account.props['accountName']}")
    captured = {}
    real = storage.azure.storagecache.AmlFilesystem

    class SpyFilesystem(real):
        def __init__(self, resource_name, opts=None, **kwargs):
            captured["depends_on"] = [type(d).__name__ for d in opts.depends_on or []]
            super().__init__(resource_name, opts=opts, **kwargs)

    monkeypatch.setattr(storage.azure.storagecache, "AmlFilesystem", SpyFilesystem)
    run_program(lambda: outputs_of(storage.DataStore(f"{STACK}-data", args())))
    assert captured["depends_on"].count("RoleAssignment") == 2 and captured["depends_on"].count("BlobContainer") == 2


def test_a_node_identity_gets_blob_data_on_the_data_container_only(planned):
    records, _ = planned
    [grant] = [r for r in by_type(records, ROLE) if r.props["principalId"] == NODE_PRINCIPAL]
    [data] = [r for r in by_type(records, CONTAINER) if r.props["containerName"] == "data"]
    assert grant.props["roleDefinitionId"] == (f"/subscriptions/{SUB}/providers/Microsoft.Authorization/"
                                               f"roleDefinitions/{STORAGE_BLOB_DATA_CONTRIBUTOR}")
    assert grant.props["scope"] == data.id
    assert grant.props["principalType"] == "ServicePrincipal"


def test_without_lustre_there_is_the_account_and_its_containers_only():
    records, outputs = run_program(lambda: outputs_of(storage.DataStore(f"{STACK}-data", args(
        parallel_fs=False, fs_size_gib=1_200, fs_throughput_per_tib=250, fs_subnet_id=None, zone=None,
        hpc_cache_principal_id=None))))
    assert not by_type(records, LUSTRE) and len(by_type(records, ROLE)) == 1
    assert outputs.get("mount") is None and outputs.get("fs") is None
    account = one(records, ACCOUNT).props
    assert [r["virtualNetworkResourceId"] for r in account["networkRuleSet"]["virtualNetworkRules"]] == [NODE_SUBNET]
    assert account["sku"] == {"name": "Standard_LRS"}


def test_admin_networks_reach_the_account_when_public():
    records, _ = run_program(lambda: outputs_of(storage.DataStore(f"{STACK}-data", args(
        allowed_ip_ranges=["203.0.113.0/24", "10.0.0.0/8", "2001:db8::/32", "52.1.2.0/24", "52.9.9.9/32"]))))
    rules = one(records, ACCOUNT).props["networkRuleSet"]["ipRules"]
    # private, documentation and IPv6 ranges never reach the firewall; a /32 is written as the bare address
    assert rules == [{"iPAddressOrRange": "52.1.2.0/24", "action": "Allow"},
                     {"iPAddressOrRange": "52.9.9.9", "action": "Allow"}]


def test_the_component_refuses_what_azure_would_refuse_mid_up():
    with pytest.raises(ValueError, match="throughputPerTib"):
        storage.check_args(args(fs_throughput_per_tib=1000))
    with pytest.raises(ValueError, match="not a storage account name"):
        storage.check_args(args(account_name="My-Account"))
    with pytest.raises(ValueError, match="hpc_cache_principal_id"):
        storage.check_args(args(hpc_cache_principal_id=None))


# ---------------------------------------------------------------- adoption of the retained account

def test_up_destroy_up_adopts_the_group_account_and_its_children_by_import():
    name = storage.account_name(PROJECT, STACK, SUB)
    account_arm = storage.account_id(SUB, DATA_GROUP, name)
    children = {storage.container_id(account_arm, "data"), storage.container_id(account_arm, "lustre-logs"),
                storage.policy_id(account_arm)}
    lookup = OfflineLookup(SUB, groups={DATA_GROUP: Found(DATA_GROUP, TAGS)}, accounts={name: Found(name, TAGS)},
                           children=children, hpc_cache_principal=RP_PRINCIPAL)
    stores = storage.RetainedStores.find(_Spec(), lookup)
    assert stores.data_group == DATA_GROUP and stores.adopt_group == f"/subscriptions/{SUB}/resourceGroups/{DATA_GROUP}"
    assert stores.account == name and stores.adopt_account == account_arm
    assert set(stores.adopt_children) == children and stores.hpc_cache_principal_id == RP_PRINCIPAL
    records, _ = run_program(lambda: outputs_of(storage.DataStore(f"{STACK}-data", args(
        adopt_account=stores.adopt_account, adopt_children=stores.adopt_children))))
    account = one(records, ACCOUNT)
    assert account.import_id == account_arm and account.retain_on_delete
    imported = {r.props["containerName"]: r.import_id for r in by_type(records, CONTAINER)}
    assert imported == {"data": storage.container_id(account_arm, "data"),
                        "lustre-logs": storage.container_id(account_arm, "lustre-logs")}
    assert one(records, POLICY).import_id == storage.policy_id(account_arm)
    assert one(records, SERVICE).import_id is None  # the blob service always exists: never created, never imported


def test_a_child_that_is_missing_is_created_not_imported():
    name = storage.account_name(PROJECT, STACK, SUB)
    lookup = OfflineLookup(SUB, accounts={name: Found(name, {})})  # an untagged account, no containers
    stores = storage.RetainedStores.find(_Spec(), lookup)
    assert stores.adopt_account and stores.adopt_children == () and stores.adopt_group is None
    records, _ = run_program(lambda: outputs_of(storage.DataStore(f"{STACK}-data", args(
        adopt_account=stores.adopt_account, adopt_children=stores.adopt_children))))
    assert all(r.import_id is None for r in by_type(records, CONTAINER) + by_type(records, POLICY))


def test_nothing_is_adopted_when_nothing_exists():
    stores = storage.RetainedStores.find(_Spec(enabled=False), OfflineLookup())
    assert stores.adopt_group is None and stores.adopt_account is None and stores.hpc_cache_principal_id is None
    assert stores.account == storage.account_name(PROJECT, STACK, storage.PLACEHOLDER_SUBSCRIPTION)


@pytest.mark.parametrize("owner", [{"project": PROJECT, STACK_TAG_KEY: "other-stack"},
                                   {"Project": "someone-else", "GoldenEnv:Stack": STACK}])
def test_an_account_of_another_stack_is_never_adopted(owner):
    lookup = OfflineLookup(SUB, accounts={"theiraccount": Found("theiraccount", owner)})
    with pytest.raises(ConfigError) as refused:
        storage.RetainedStores.find(_Spec(bucket_name="theiraccount"), lookup)
    text = str(refused.value)
    assert "goldenenv:storage.bucket.bucketName" in text and "theiraccount" in text and "belongs to" in text


def test_a_resource_group_of_another_stack_is_refused():
    lookup = OfflineLookup(groups={DATA_GROUP: Found(DATA_GROUP, {"project": "vision", STACK_TAG_KEY: STACK})})
    with pytest.raises(ConfigError, match="goldenenv:tags.project.*belongs to project 'vision'"):
        storage.RetainedStores.find(_Spec(), lookup)


def test_a_tenant_without_the_hpc_cache_provider_is_told_how_to_register_it():
    with pytest.raises(ConfigError) as refused:
        storage.RetainedStores.find(_Spec(), OfflineLookup(hpc_cache_principal=None))
    text = str(refused.value)
    assert "goldenenv:storage.parallelFs.enabled" in text and HPC_CACHE_APP in text
    assert "az provider register --namespace Microsoft.StorageCache" in text


# ---------------------------------------------------------------- ARM and Graph, through a recording fake

class FakeArm:
    """Answers like ARM: routes map (method, path without query) to a list of answers, the last one repeated; an
    answer is a body (dict) or an ArmError to raise. Every request is recorded."""

    def __init__(self, routes):
        self.routes = {k: list(v) for k, v in routes.items()}
        self.requests = []

    def __call__(self, method, url, token, body=None):
        self.requests.append((method, url, token, body))
        path = url.split("://", 1)[-1].split("/", 1)[-1]
        key = (method, "/" + path.split("?", 1)[0])
        answers = self.routes.get(key)
        if not answers:
            raise ArmError(404, f"no route {key}", "ResourceNotFound")
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


FS_PATH = (f"/subscriptions/{SUB}/resourceGroups/{COMPUTE_GROUP}/providers/Microsoft.StorageCache/amlFilesystems/"
           "azure-ndh100-2node-data-lustre")
CONTAINERS = f"/subscriptions/{SUB}/resourceGroups/{DATA_GROUP}/providers/Microsoft.Storage/storageAccounts/acct"


def filesystem(state=None, started="2026-05-01T10:00:00Z", percent=None, error=None, message=None) -> dict:
    """An AmlFilesystem as GET returns it (amlFilesystems_Get.json, 2024-03-01), with one archiveStatus entry."""
    status = {"state": state, "lastStartedTime": started, "lastCompletionTime": "2026-05-01T11:00:00Z",
              "percentComplete": percent, "errorCode": error, "errorMessage": message}
    hsm = {"settings": {"container": f"{CONTAINERS}/blobServices/default/containers/data",
                        "loggingContainer": f"{CONTAINERS}/blobServices/default/containers/lustre-logs",
                        "importPrefix": "/"}}
    if state:
        hsm["archiveStatus"] = [{"filesystemPath": "/", "status": {k: v for k, v in status.items() if v is not None}}]
    return {"id": FS_PATH, "name": FS_PATH.rsplit("/", 1)[-1], "type": "Microsoft.StorageCache/amlFilesystem",
            "properties": {"storageCapacityTiB": 8, "provisioningState": "Succeeded", "hsm": hsm,
                           "clientInfo": {"mgsAddress": "10.42.128.4",
                                          "mountCommand": "mount -t lustre 10.42.128.4@tcp:/lustrefs /lustre"}}}


def run_archive(fake, **more):
    logs = []
    result = storage.archive(SUB, COMPUTE_GROUP, FS_PATH.rsplit("/", 1)[-1], logs.append, token_fn=lambda: "tok",
                             poll_seconds=0, sleep=lambda s: None, rest=fake, **more)
    return result, logs


def test_archive_posts_the_whole_tree_and_polls_until_this_archive_completes():
    fake = FakeArm({
        ("GET", FS_PATH): [filesystem("Completed", started="2026-04-01T00:00:00Z"),  # an earlier archive
                           filesystem("Completed", started="2026-04-01T00:00:00Z"),  # ours not picked up yet
                           filesystem("FSScanInProgress", started="2026-05-01T10:00:00Z", percent=0),
                           filesystem("InProgress", started="2026-05-01T10:00:00Z", percent=55),
                           filesystem("Completed", started="2026-05-01T10:00:00Z")],
        ("POST", f"{FS_PATH}/archive"): [{}],
    })
    result, logs = run_archive(fake)
    posts = [r for r in fake.requests if r[0] == "POST"]
    assert len(posts) == 1 and posts[0][3] == {"filesystemPath": "/"}
    assert "api-version=2024-03-01" in posts[0][1] and posts[0][2] == "tok"
    assert [r[0] for r in fake.requests] == ["GET", "POST", "GET", "GET", "GET", "GET"]
    assert result.last_completion_time == "2026-05-01T11:00:00Z"
    assert any("55 %" in line for line in logs)


def test_a_failed_archive_stops_destroy_with_the_reason_and_the_command():
    fake = FakeArm({
        ("GET", FS_PATH): [filesystem(), filesystem("InProgress", percent=10),
                           filesystem("Failed", error="ArchiveFailed", message="container not reachable")],
        ("POST", f"{FS_PATH}/archive"): [{}],
    })
    with pytest.raises(RuntimeError) as failed:
        run_archive(fake)
    text = str(failed.value)
    assert "Failed" in text and "ArchiveFailed: container not reachable" in text
    assert "az amlfs archive --amlfs-name azure-ndh100-2node-data-lustre --resource-group " + COMPUTE_GROUP in text


def test_an_earlier_failure_is_not_taken_for_this_archives():
    fake = FakeArm({
        ("GET", FS_PATH): [filesystem("Failed", started="2026-04-01T00:00:00Z", error="Old"),
                           filesystem("Failed", started="2026-04-01T00:00:00Z", error="Old"),
                           filesystem("Completed", started="2026-05-01T10:00:00Z")],
        ("POST", f"{FS_PATH}/archive"): [{}],
    })
    result, _ = run_archive(fake)
    assert result is not None


def test_a_running_archive_is_waited_for_before_ours_starts():
    fake = FakeArm({
        ("GET", FS_PATH): [filesystem("InProgress", started="2026-04-01T00:00:00Z", percent=90),
                           filesystem("Completed", started="2026-04-01T00:00:00Z"),
                           filesystem("Completed", started="2026-05-01T10:00:00Z")],
        ("POST", f"{FS_PATH}/archive"): [{}],
    })
    run_archive(fake)
    assert [r[0] for r in fake.requests] == ["GET", "GET", "POST", "GET"]


def test_archive_of_a_filesystem_that_is_gone_is_nothing_to_do_and_a_stuck_one_times_out():
    result, logs = run_archive(FakeArm({}))
    assert result is None and "no longer exists" in logs[0]
    stuck = FakeArm({("GET", FS_PATH): [filesystem(), filesystem("InProgress", percent=1)],
                     ("POST", f"{FS_PATH}/archive"): [{}]})
    with pytest.raises(RuntimeError, match="still running after"):
        run_archive(stuck, timeout_seconds=0)
    refused = FakeArm({("GET", FS_PATH): [filesystem()],
                       ("POST", f"{FS_PATH}/archive"): [ArmError(409, "busy", "Conflict")]})
    with pytest.raises(RuntimeError, match="could not start .* busy"):
        run_archive(refused)


def test_purge_deletes_only_the_named_account():
    path = f"/subscriptions/{SUB}/resourceGroups/{DATA_GROUP}/providers/Microsoft.Storage/storageAccounts/acct"
    fake = FakeArm({("GET", path): [{"name": "acct"}], ("DELETE", path): [{}]})
    logs = []
    assert storage.purge(SUB, DATA_GROUP, "acct", logs.append, token_fn=lambda: "t", rest=fake) is True
    deletes = [r[1] for r in fake.requests if r[0] == "DELETE"]
    assert len(deletes) == 1 and deletes[0].startswith(f"https://management.azure.com{path}?api-version=")
    assert "purged storage account acct" in logs[-1]
    gone = FakeArm({})
    assert storage.purge(SUB, DATA_GROUP, "acct", logs.append, token_fn=lambda: "t", rest=gone) is False
    assert [r[0] for r in gone.requests] == ["GET"]


def test_the_live_lookup_reads_tags_vaults_and_the_providers_principal(monkeypatch):
    monkeypatch.delenv(storage.HPC_CACHE_PRINCIPAL_ENV, raising=False)
    account = f"/subscriptions/{SUB}/resourceGroups/{DATA_GROUP}/providers/Microsoft.Storage/storageAccounts"
    fake = FakeArm({
        ("GET", f"/subscriptions/{SUB}/resourceGroups/{DATA_GROUP}"): [{"name": DATA_GROUP, "tags": TAGS}],
        ("GET", f"{account}/mine"): [{"name": "mine", "tags": {"project": PROJECT}}],
        ("POST", f"/subscriptions/{SUB}/providers/Microsoft.Storage/checkNameAvailability"): [
            {"nameAvailable": True},
            {"nameAvailable": False, "reason": "AlreadyExists", "message": "The storage account named x is taken."}],
        ("GET", f"{account}/mine/blobServices/default/containers"): [{"value": [{"name": "data"}]}],
        ("GET", f"/subscriptions/{SUB}/providers/Microsoft.KeyVault/deletedVaults"): [
            {"value": [{"id": f"/subscriptions/{SUB}/providers/Microsoft.KeyVault/locations/eastus/deletedVaults/a",
                        "name": "a"}], "nextLink": f"https://management.azure.com/subscriptions/{SUB}/providers/"
                                                   "Microsoft.KeyVault/deletedVaults?page=2"},
            {"value": [{"id": f"/subscriptions/{SUB}/providers/Microsoft.KeyVault/locations/eastus/deletedVaults/"
                              "kv-azure-1234", "name": "kv-azure-1234"}]}],
        ("GET", f"/v1.0/servicePrincipals(appId='{HPC_CACHE_APP}')"): [{"id": RP_PRINCIPAL}],
    })
    lookup = storage.LiveLookup(SUB, token_fn=lambda: "arm", graph_token_fn=lambda: "graph", rest=fake)
    assert lookup.resource_group(DATA_GROUP) == Found(DATA_GROUP, TAGS)
    assert lookup.storage_account(DATA_GROUP, "mine") == Found("mine", {"project": PROJECT})
    assert lookup.storage_account(DATA_GROUP, "free") is None
    with pytest.raises(ConfigError, match="bucketName.*global"):
        lookup.storage_account(DATA_GROUP, "taken")
    assert lookup.storage_children(DATA_GROUP, "mine") == {f"{account}/mine/blobServices/default/containers/data"}
    assert lookup.deleted_vault("KV-azure-1234") and not lookup.deleted_vault("kv-other")
    assert lookup.hpc_cache_principal_id() == RP_PRINCIPAL
    graph = [r for r in fake.requests if "graph.microsoft.com" in r[1]]
    assert graph and all(r[2] == "graph" for r in graph)
    assert lookup.registry(DATA_GROUP, "geregistry") is None


def test_a_login_that_cannot_read_graph_is_told_how_to_give_the_principal(monkeypatch):
    path = f"/v1.0/servicePrincipals(appId='{HPC_CACHE_APP}')"
    lookup = storage.LiveLookup(SUB, token_fn=lambda: "t", graph_token_fn=lambda: "g", rest=FakeArm({
        ("GET", path): [ArmError(403, "Insufficient privileges", "Authorization_RequestDenied")]}))
    monkeypatch.delenv(storage.HPC_CACHE_PRINCIPAL_ENV, raising=False)
    with pytest.raises(ConfigError) as refused:
        lookup.hpc_cache_principal_id()
    assert f"az ad sp show --id {HPC_CACHE_APP}" in str(refused.value)
    assert storage.HPC_CACHE_PRINCIPAL_ENV in str(refused.value)
    monkeypatch.setenv(storage.HPC_CACHE_PRINCIPAL_ENV, RP_PRINCIPAL)
    assert lookup.hpc_cache_principal_id() == RP_PRINCIPAL


def test_scale_set_addresses_come_in_instance_order():
    path = (f"/subscriptions/{SUB}/resourceGroups/{COMPUTE_GROUP}/providers/microsoft.Compute/"
            "virtualMachineScaleSets/gpu/networkInterfaces")

    def nic(instance, address):
        return {"properties": {"virtualMachine": {"id": f"{path}/virtualMachines/{instance}"},
                               "ipConfigurations": [{"properties": {"primary": True,
                                                                    "privateIPAddress": address}}]}}

    fake = FakeArm({("GET", path): [{"value": [nic(10, "10.42.0.9"), nic(2, "10.42.0.5")]}]})
    lookup = storage.LiveLookup(SUB, token_fn=lambda: "t", rest=fake)
    assert lookup.scale_set_addresses(COMPUTE_GROUP, "gpu") == ["10.42.0.5", "10.42.0.9"]


# ---------------------------------------------------------------- plan mocks and the mount script

def test_plan_mocks_depend_on_the_resource_alone():
    def mock(typ, name, inputs):
        return storage.plan_mock(pulumi.runtime.MockResourceArgs(typ=typ, name=name, inputs=inputs, provider=None,
                                                                 resource_id=None))

    inputs = {"amlFilesystemName": "fs", "resourceGroupName": "rg", "storageCapacityTiB": 8,
              "sku": {"name": "AMLFS-Durable-Premium-500"}}
    assert mock(LUSTRE, "x", inputs) == mock(LUSTRE, "x", dict(inputs))
    resource_id, state = mock(LUSTRE, "x", inputs)
    assert resource_id.endswith("/resourceGroups/rg/providers/Microsoft.StorageCache/amlFilesystems/fs")
    assert state["throughputProvisionedMBps"] == 4_000 and state["clientInfo"]["mgsAddress"].startswith("10.42.128.")
    account_arm, account = mock(ACCOUNT, "a", {"accountName": "acct", "resourceGroupName": "rg"})
    assert account_arm == f"/subscriptions/{storage.PLACEHOLDER_SUBSCRIPTION}/resourceGroups/rg/providers/" \
                          "Microsoft.Storage/storageAccounts/acct"
    assert account["primaryEndpoints"]["blob"] == "https://acct.blob.core.windows.net/"
    assert mock(CONTAINER, "c", {"accountName": "acct", "resourceGroupName": "rg", "containerName": "data"})[0] == \
        f"{account_arm}/blobServices/default/containers/data"
    assert mock("azure-native:compute:VirtualMachine", "n", {}) is None


def bash_n(script: str) -> None:
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


def mount_script(mgs: str = "10.42.128.4") -> str:
    return render("node/lustre-mount-azure.sh.j2", mount_point="/fsx", owner=1000,
                  directories=["/fsx/datasets", "/fsx/checkpoints"], ready=ready_marker(storage.SHAREDFS_UNIT),
                  **storage.lustre_mount(mgs).values)


def test_the_mount_script_mounts_lustrefs_with_microsofts_options():
    script = mount_script()
    bash_n(script)
    assert "source_path=10.42.128.4@tcp:/lustrefs" in script and "options=noatime,flock" in script
    assert 'mount -t lustre -o "$options" "$source_path" "$mount_point"' in script
    assert "modprobe lustre" in script and "mkdir -p /fsx/datasets /fsx/checkpoints" in script
    assert ready_marker(storage.SHAREDFS_UNIT) in script


def test_a_hostile_value_reaches_the_mount_script_as_data():
    script = mount_script("10.0.0.2; touch /tmp/pwned")
    bash_n(script)
    assert "source_path='10.0.0.2; touch /tmp/pwned@tcp:/lustrefs'" in script

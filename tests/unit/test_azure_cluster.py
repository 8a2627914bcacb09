"""The Azure program under Pulumi's mock runtime: what `pulumi up` would create, checked offline.

Sizes, prices, drivers and image versions come from the catalog; a few literal anchors from Microsoft's public
tables (ND H100 v5: 8 H100 and 8 InfiniBand ports; a single placement group holds at most 100 VMs) make a wrong row
or a wrong limit fail.
"""

from __future__ import annotations

import base64
import copy

import pulumi_azure_native as azure
import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import catalog, compat, stackconfig
from goldenenv.cli import app
from goldenenv.clouds.azure import nodes as azure_nodes
from goldenenv.clouds.azure import roles
from goldenenv.plan import plan, plan_config, stack_file
from goldenenv.spec import ConfigError

SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
VM = "azure-native:compute:VirtualMachine"
NSG = "azure-native:network:NetworkSecurityGroup"
SUBNET = "azure-native:network:Subnet"
PUBLIC_IP = "azure-native:network:PublicIPAddress"
NIC = "azure-native:network:NetworkInterface"
ROLE = "azure-native:authorization:RoleAssignment"
IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
ACCOUNT = "azure-native:storage:StorageAccount"
LUSTRE = "azure-native:storagecache:AmlFilesystem"
BUDGET = "azure-native:consumption:Budget"
GROUP = "azure-native:resources:ResourceGroup"
TRAINING, DEV = "azure-ndh100-2node", "azure-nc-dev"
EXAMPLES = [TRAINING, DEV]
H100 = "Standard_ND96isr_H100_v5"
PUSHED = "ge.azurecr.io/goldenenv@sha256:" + "a" * 64
runner = CliRunner()

# The provider takes these strings without checking them client-side; the valid values are the SDK's own enums.
VALID = {
    "orchestrationMode": {m.value for m in azure.compute.OrchestrationMode},
    "priority": {m.value for m in azure.compute.VirtualMachinePriorityTypes},
    "evictionPolicy": {m.value for m in azure.compute.VirtualMachineEvictionPolicyTypes},
    "createOption": {m.value for m in azure.compute.DiskCreateOptionTypes},
    "caching": {m.value for m in azure.compute.CachingTypes},
    "storageAccountType": {m.value for m in azure.compute.StorageAccountTypes},
    "mode": {m.value for m in azure.compute.UpgradeMode},
    "access": {m.value for m in azure.network.SecurityRuleAccess},
    "direction": {m.value for m in azure.network.SecurityRuleDirection},
    "protocol": {m.value for m in azure.network.SecurityRuleProtocol},
    "publicIPAllocationMethod": {m.value for m in azure.network.IPAllocationMethod},
    "principalType": {m.value for m in azure.authorization.PrincipalType},
}


def config(stack: str = TRAINING, **node_changes) -> dict:
    found = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    found["goldenenv:nodes"].update(node_changes)
    return found


def cloud_config(resource) -> dict:
    profile = resource.props.get("virtualMachineProfile", resource.props)
    return yaml.safe_load(base64.b64decode(profile["osProfile"]["customData"]))


def files_of(resource) -> dict[str, str]:
    return {f["path"]: f["content"] for f in cloud_config(resource)["write_files"]}


@pytest.fixture(scope="module")
def training():
    pushed = config()
    pushed["goldenenv:image"] = {"lock": "azure-h100", "ref": PUSHED}
    return plan_config(TRAINING, pushed)


@pytest.mark.parametrize("stack", EXAMPLES)
def test_example_stacks_plan_without_failed_guardrails_even_strict(stack):
    result = plan(stack, strict=True)
    assert not result.failed, [f"{f.rule} {f.resource}: {f.message}" for f in result.findings
                               if f.severity.value == "error"]


def test_the_pool_is_one_scale_set_in_a_single_placement_group(training):
    it = catalog.instance_type("azure", H100)
    assert it.gpu_count == 8 and it.rdma == "ib" and it.rdma_interfaces == 8  # ND H100 v5: 8 GPUs, 8 NDR ports
    (scale_set,) = training.of_type(SCALE_SET)
    props = scale_set.props
    assert props["sku"]["name"] == H100 and props["sku"]["capacity"] == 2
    assert props["orchestrationMode"] == "Uniform" and props["singlePlacementGroup"] is True
    assert props["platformFaultDomainCount"] == 1 and props["overprovision"] is False
    assert props["upgradePolicy"]["mode"] == "Manual"


def test_the_hpc_image_is_pinned_by_version_and_its_driver_checked_against_the_lock(training):
    image = compat.node_host("azure", "eastus", None).image
    assert image is not None and image.image_id.count(":") == 3
    publisher, offer, sku, version = image.image_id.split(":")
    (scale_set,) = training.of_type(SCALE_SET)
    reference = scale_set.props["virtualMachineProfile"]["storageProfile"]["imageReference"]
    assert reference == {"publisher": publisher, "offer": offer, "sku": sku, "version": version}
    assert version != "latest" and version[0].isdigit()
    (checked,) = training.compat
    assert checked.host.driver == image.nvidia_driver and checked.lock == "azure-h100" and checked.ok


def test_no_host_has_a_public_ip_and_ssh_comes_only_from_admin_cidrs():
    found = config()
    found["goldenenv:network"] = {"cidr": "10.42.0.0/16", "adminCidrs": ["203.0.113.0/24"]}
    result = plan_config(TRAINING, found)
    (scale_set,) = result.of_type(SCALE_SET)
    for nic in scale_set.props["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]:
        assert nic["enableAcceleratedNetworking"] is True
        assert all("publicIPAddressConfiguration" not in ip for ip in nic["ipConfigurations"])
    for nic in result.of_type(NIC):
        assert all("publicIPAddress" not in ip for ip in nic.props["ipConfigurations"])
    # the one public address is the NAT gateway's, for egress
    (address,) = result.of_type(PUBLIC_IP)
    assert address.name.endswith("-nat-ip")
    (nsg,) = result.of_type(NSG)
    rules = {r["name"]: r for r in nsg.props["securityRules"]}
    ssh = [r for r in rules.values() if r["access"] == "Allow" and r.get("destinationPortRange") == "22"]
    assert [r["sourceAddressPrefix"] for r in ssh] == ["203.0.113.0/24"]
    # the cluster's own hosts by membership (the application security group every NIC joins), not by a range
    (group,) = result.of_type("azure-native:network:ApplicationSecurityGroup")
    (cluster,) = [r for r in rules.values() if r.get("sourceApplicationSecurityGroups")]
    assert cluster["sourceApplicationSecurityGroups"] == [{"id": group.id}] and "sourceAddressPrefix" not in cluster
    members = [ip for nic in scale_set.props["virtualMachineProfile"]["networkProfile"]
               ["networkInterfaceConfigurations"] for ip in nic["ipConfigurations"]]
    members += [ip for nic in result.of_type(NIC) for ip in nic.props["ipConfigurations"]]
    assert all(ip["applicationSecurityGroups"] == [{"id": group.id}] for ip in members) and len(members) == 2
    lustre = [s.props["addressPrefix"] for s in result.of_type(SUBNET) if s.props["subnetName"] == "lustre"]
    ranges = {r["sourceAddressPrefix"] for r in rules.values() if r["access"] == "Allow" and r not in (cluster,)}
    assert ranges == {"203.0.113.0/24", *lustre}
    assert rules["deny-inbound"]["access"] == "Deny" and rules["deny-inbound"]["sourceAddressPrefix"] == "*"
    assert rules["deny-inbound"]["priority"] > max(r["priority"] for r in rules.values() if r["access"] == "Allow")
    for subnet in result.of_type(SUBNET):
        assert subnet.props["defaultOutboundAccess"] is False


def test_each_identity_holds_only_what_its_host_uses(training):
    identities = {i.outputs["principalId"]: i.name for i in training.of_type(IDENTITY)
                  if i.name.endswith(("-gpu-identity", "-head-identity"))}
    granted: dict[str, set] = {}
    for role in training.of_type(ROLE):
        if role.props["principalId"] not in identities:
            continue  # Managed Lustre's and the budget function's (test_azure_storage's, test_azure_budget's)
        name = next(n for n, guid in roles.BUILT_IN.items() if role.props["roleDefinitionId"].endswith(guid))
        kind = role.props["scope"].split("/providers/")[-1].split("/")[1]
        granted.setdefault(identities[role.props["principalId"]], set()).add((name, kind))
    node = next(v for k, v in granted.items() if k.endswith("-gpu-identity"))
    head = next(v for k, v in granted.items() if k.endswith("-head-identity"))
    assert node == {("AcrPull", "registries"), ("Key Vault Secrets User", "vaults"),
                    ("Storage Blob Data Contributor", "storageAccounts")}
    assert head == {("AcrPull", "registries"), ("Key Vault Secrets Officer", "vaults"),
                    ("Storage Blob Data Contributor", "storageAccounts")}
    for role in training.of_type(ROLE):
        if role.props["principalId"] in identities:
            assert role.props["principalType"] == "ServicePrincipal"
            assert "/resourceGroups/" in role.props["scope"]  # never a subscription-wide grant


def test_nodes_boot_the_golden_container_with_the_hosts_nccl_conf_and_fetch_munge_from_the_vault(training):
    (scale_set,) = training.of_type(SCALE_SET)
    files = files_of(scale_set)
    container = next(c for p, c in files.items() if p.endswith("golden-image.sh"))
    assert "/etc/nccl.conf:/etc/nccl.conf:ro" in container and "/opt/microsoft:/opt/microsoft:ro" in container
    assert ".azurecr.io" in container and "oauth2/exchange" in container
    # the health check holds the 8 InfiniBand ports to their NDR rate (catalog health_links.csv)
    assert "fabric=ib" in container and "fabric_devices=8" in container and "fabric_rate_gbps=400" in container
    munge = next(c for p, c in files.items() if p.endswith("munge-key-azure.sh"))
    (vault,) = training.of_type("azure-native:keyvault:Vault")
    assert vault.outputs["properties"]["vaultUri"].rstrip("/") in munge
    (identity,) = [i for i in training.of_type(IDENTITY) if i.name.endswith("-gpu-identity")]
    assert identity.outputs["clientId"] in munge
    assert vault.props["properties"]["enableRbacAuthorization"] is True
    assert vault.props["properties"]["networkAcls"]["defaultAction"] == "Deny"


def test_custom_data_fits_azures_limit(training):
    # Azure takes at most 64 KB of customData (base64), the limit of the osProfile.customData field
    for resource in training.of_type(SCALE_SET) + training.of_type(VM):
        profile = resource.props.get("virtualMachineProfile", resource.props)
        assert len(profile["osProfile"]["customData"]) < 65536, resource.name


def test_without_a_key_nodes_log_in_with_entra_id_and_the_admin_key_is_one_nobody_holds(training):
    (scale_set,) = training.of_type(SCALE_SET)
    profile = scale_set.props["virtualMachineProfile"]
    linux = profile["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True
    assert [k["keyData"] for k in linux["ssh"]["publicKeys"]] == [azure_nodes.LOCKED_ADMIN_KEY]
    assert [e["name"] for e in profile["extensionProfile"]["extensions"]] == ["AADSSHLoginForLinux"]


def test_with_a_key_the_pool_takes_it_and_no_entra_extension():
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHfXn0pZ9y0nC0eYzI2rBq8bJ0Vt1q2T0yqzB0b1b2b3 me@laptop"
    result = plan_config(TRAINING, config(sshPublicKey=key))
    (scale_set,) = result.of_type(SCALE_SET)
    profile = scale_set.props["virtualMachineProfile"]
    assert [k["keyData"] for k in profile["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]] == [key]
    assert "extensionProfile" not in profile


def test_spot_pools_are_deallocated_on_eviction_and_never_for_price():
    spot = plan_config(TRAINING, config(capacity="spot"))
    (scale_set,) = spot.of_type(SCALE_SET)
    profile = scale_set.props["virtualMachineProfile"]
    assert profile["priority"] == "Spot" and profile["evictionPolicy"] == "Deallocate"
    assert profile["billingProfile"]["maxPrice"] == -1


def test_storage_lustre_and_the_deallocating_budget_are_planned(training):
    (account,) = training.of_type(ACCOUNT) if len(training.of_type(ACCOUNT)) == 1 else [
        a for a in training.of_type(ACCOUNT) if a.props.get("accountName") == training.outputs["storageAccount"]]
    assert account.retain_on_delete and account.props["allowBlobPublicAccess"] is False
    (lustre,) = training.of_type(LUSTRE)
    fs = training.spec.storage.parallel_fs
    assert lustre.props["storageCapacityTiB"] * 1024 == fs.size_gib
    assert str(fs.throughput_per_tib) in lustre.props["sku"]["name"]
    assert len(training.of_type(BUDGET)) == 1 and training.outputs["budgetFunction"]
    data_group = [g for g in training.of_type(GROUP) if g.retain_on_delete]
    assert [g.props["resourceGroupName"] for g in data_group] == [training.outputs["dataResourceGroup"]]


def test_cost_per_hour_comes_from_the_catalog(training):
    price = catalog.price("azure", H100, "eastus")
    compute = [line for line in training.lines if line.name == f"compute {training.spec.nodes[0].name}"]
    assert compute and compute[0].amount == pytest.approx(2 * price.usd_per_hour)
    assert training.usd_per_hour > 2 * price.usd_per_hour


def test_every_taggable_resource_carries_the_stack_tags(training):
    wanted = {"goldenenv:stack": TRAINING, "project": "llm-pretrain"}
    tagged = {r.name: r.props["tags"] for r in training.resources if r.custom and "tags" in r.props}
    assert len(tagged) > 10
    for name, found in tagged.items():
        assert wanted.items() <= found.items(), name


@pytest.mark.parametrize("stack", EXAMPLES)
def test_enum_strings_are_ones_the_arm_apis_take(stack):
    result = plan(stack)

    def walk(value, key=None):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(v, k)
        elif isinstance(value, list):
            for v in value:
                yield from walk(v, key)
        elif key in VALID and isinstance(value, str):
            yield key, value

    found = [(r.name, k, v) for r in result.resources if r.type.startswith(("azure-native:compute:",
                                                                            "azure-native:network:",
                                                                            "azure-native:authorization:"))
             for k, v in walk(r.props)]
    assert len(found) > 10
    assert [f for f in found if f[2] not in VALID[f[1]]] == []


def test_plan_command_shows_the_scale_set_storage_budget_and_cost():
    result = runner.invoke(app, ["plan", "-s", TRAINING], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "singlePlacementGroup=True" in result.output and f"name={H100}" in result.output
    assert LUSTRE in result.output and BUDGET in result.output and ACCOUNT in result.output
    price = catalog.price("azure", H100, "eastus")
    assert f"{2 * price.usd_per_hour:,.2f}" in result.output
    assert "no guardrail failed" in result.output


@pytest.mark.parametrize("changes, key", [
    ({"goldenenv:nodes": {"instanceType": H100, "count": 101}}, "goldenenv:nodes.count"),
    ({"goldenenv:zone": "eastus-a"}, "goldenenv:zone"),
    ({"goldenenv:region": "East US"}, "goldenenv:region"),
    ({"goldenenv:budget": {"monthlyLimit": 100, "currency": "EUR", "emails": ["a@example.com"]}},
     "goldenenv:budget.currency"),
    ({"goldenenv:tags": {"project": "p", "owner": "o", "costCenter": "c", "team/name": "x"}}, "goldenenv:tags"),
])
def test_bad_input_names_the_key_and_exits_2(tmp_path, changes, key):
    doc = yaml.safe_load(stack_file(TRAINING).read_text())
    doc["config"].update(changes)
    (tmp_path / stack_file(TRAINING).name).write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["plan", "-s", TRAINING, "--stacks-dir", str(tmp_path)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert key in result.output and "Traceback" not in result.output


def test_a_pool_of_101_nodes_is_refused_naming_nodes_count_before_anything_is_planned():
    with pytest.raises(ConfigError) as refused:
        plan_config(TRAINING, config(count=101))
    (problem,) = [p for p in refused.value.problems if p.key == "goldenenv:nodes.count"]
    assert "100" in problem.message and "placement group" in problem.message


def test_a_range_too_small_for_the_subnets_is_refused_naming_the_key():
    found = config()
    found["goldenenv:network"] = {"cidr": "10.42.0.0/29"}
    with pytest.raises(ConfigError) as refused:
        plan_config(TRAINING, found)
    assert "goldenenv:network.cidr" in [p.key for p in refused.value.problems]


def test_the_nodes_addresses_are_the_ones_azure_gave_the_scale_set_once_it_exists():
    """A Uniform scale set's NICs are Azure's: `up` asks ARM for them by the scale set's id (unknown in a preview)."""
    from goldenenv.clouds import BuildContext
    from goldenenv.plan import offline_context

    spec = plan(DEV).spec
    offline = offline_context(spec).lookup
    asked = []

    class Deployed(type(offline)):
        def scale_set_addresses(self, group, scale_set):
            asked.append((group, scale_set))
            return ["10.42.0.7"]

    lookup = Deployed()
    result = plan(DEV, context=BuildContext(lookup=lookup))
    (scale_set,) = result.of_type(SCALE_SET)
    assert asked == [(scale_set.props["resourceGroupName"], scale_set.props["vmScaleSetName"])]
    assert result.outputs["nodePrivateIps"] == ["10.42.0.7"]
    assert result.outputs["hostfile"] == "10.42.0.7 slots=1\n"

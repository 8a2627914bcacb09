"""Azure's tag rules, guardrail facts and deploy-readiness rules: each catches the bad form and passes the good one,
on resources built by hand in engine (camelCase) form as `goldenenv plan` records them (pulumi-azure-native 3.x
input names). Azure's limits are anchored by a few literals from its documentation."""

from __future__ import annotations

import pytest

from goldenenv import catalog, guardrails
from goldenenv.clouds.azure import guardrail_facts, readiness, tags
from goldenenv.guardrails import Finding, PlannedResource, Severity, evaluate, is_taggable

TAGS = {"project": "llm", "owner": "ml-team", "cost-center": "R-1", "goldenenv:stack": "demo"}
H100 = "Standard_ND96isr_H100_v5"
T4 = "Standard_NC4as_T4_v3"
REGION = "eastus"

NSG = "azure-native:network:NetworkSecurityGroup"
SECURITY_RULE = "azure-native:network:SecurityRule"
SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
VM = "azure-native:compute:VirtualMachine"
NIC = "azure-native:network:NetworkInterface"
PUBLIC_IP = "azure-native:network:PublicIPAddress"
NAT = "azure-native:network:NatGateway"
SUBNET = "azure-native:network:Subnet"
RESOURCE_GROUP = "azure-native:resources:ResourceGroup"
ACCOUNT = "azure-native:storage:StorageAccount"
CONTAINER = "azure-native:storage:BlobContainer"
LUSTRE = "azure-native:storagecache:AmlFilesystem"
BUDGET = "azure-native:consumption:Budget"
ACTION_GROUP = "azure-native:monitor:ActionGroup"
WEB_APP = "azure-native:web:WebApp"


@pytest.fixture(autouse=True)
def azure_facts(monkeypatch):
    """Azure's facts in every rule, as written in goldenenv/clouds/azure/ (registered in case discovery lags)."""
    guardrails.provider_facts()
    monkeypatch.setitem(guardrails.PROVIDERS, "azure-native", guardrail_facts.FACTS)


def res(type_: str, name: str, props: dict | None = None, *, parent: str = "", **kwargs) -> PlannedResource:
    """A resource as `goldenenv plan` records it under mocks (id = f"{name}-id"; options it did not set are False);
    parent: the component type chain of its URN ("goldenenv:azure:GpuCluster$goldenenv:azure:SlurmHead$")."""
    kwargs.setdefault("retain_on_delete", False)
    return PlannedResource(urn=f"urn:pulumi:demo::goldenenv::{parent}{type_}::{name}", type=type_, name=name,
                           props=props or {}, id=f"{name}-id", **kwargs)


def found(resources: list[PlannedResource], rule: str, **kwargs) -> list[Finding]:
    return [f for f in evaluate(resources, TAGS, **kwargs) if f.rule == rule]


def strict(resources: list[PlannedResource], rule: str) -> list[str]:
    return [f.message for f in readiness.findings(resources, TAGS) if f.rule == rule]


def _rule(name: str, source: str = "203.0.113.0/24", port: str = "22", **over) -> dict:
    return {"name": name, "priority": 110, "direction": "Inbound", "access": "Allow", "protocol": "Tcp",
            "sourceAddressPrefix": source, "sourcePortRange": "*", "destinationAddressPrefix": "*",
            "destinationPortRange": port, **over}


def nsg(*rules: dict) -> PlannedResource:
    """The compute subnet's NSG as network.py plans it: the VNet in, SSH from an admin /24, everything else denied."""
    base = [_rule("vnet-inbound", "VirtualNetwork", "*", protocol="*", priority=100), _rule("ssh-admin-0"),
            _rule("deny-inbound", "*", "*", protocol="*", access="Deny", priority=4096)]
    return res(NSG, "demo-nsg", {"networkSecurityGroupName": "demo-compute", "resourceGroupName": "rg-demo",
                                 "tags": dict(TAGS), "securityRules": list(rules) or base})


def scale_set(name: str = "demo-gpu", *, vm_size: str = H100, count: int = 2, profile: dict | None = None,
              **props) -> PlannedResource:
    """A node pool's scale set as nodes.py plans it; props and profile entries override."""
    vm_profile = {
        "priority": "Regular",
        "storageProfile": {"imageReference": {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204",
                                              "version": "22.04.2025010101"},
                           "osDisk": {"createOption": "FromImage",
                                      "managedDisk": {"storageAccountType": "Premium_LRS"}}},
        "networkProfile": {"networkInterfaceConfigurations": [{"name": "eth0", "primary": True, "ipConfigurations": [
            {"name": "ipv4", "primary": True, "subnet": {"id": "demo-compute-id"}}]}]},
        **(profile or {})}
    base = {"resourceGroupName": "rg-demo", "location": REGION, "zones": ["1"], "tags": dict(TAGS),
            "sku": {"name": vm_size, "tier": "Standard", "capacity": float(count)}, "orchestrationMode": "Uniform",
            "singlePlacementGroup": True, "platformFaultDomainCount": 1.0, "overprovision": False,
            "virtualMachineProfile": vm_profile}
    return res(SCALE_SET, name, {**base, **props}, parent="goldenenv:azure:GpuCluster$goldenenv:azure:GpuNodePool$")


HEAD_CHAIN = "goldenenv:azure:GpuCluster$goldenenv:azure:SlurmHead$"


def head(network_profile: dict | None = None) -> PlannedResource:
    profile = {"networkInterfaces": [{"id": "demo-head-nic-id", "primary": True}]}
    profile = network_profile if network_profile is not None else profile
    return res(VM, "demo-head", {"resourceGroupName": "rg-demo", "location": REGION, "tags": dict(TAGS),
                                 "hardwareProfile": {"vmSize": "Standard_D2s_v5"}, "networkProfile": profile},
               parent=HEAD_CHAIN)


def head_nic(**ip) -> PlannedResource:
    return res(NIC, "demo-head-nic", {"resourceGroupName": "rg-demo", "tags": dict(TAGS), "ipConfigurations": [
        {"name": "ipv4", "subnet": {"id": "demo-compute-id"}, **ip}]}, parent=HEAD_CHAIN)


def nat() -> list[PlannedResource]:
    address = res(PUBLIC_IP, "demo-nat-ip", {"resourceGroupName": "rg-demo", "tags": dict(TAGS),
                                             "sku": {"name": "Standard"}, "publicIPAllocationMethod": "Static"})
    gateway = res(NAT, "demo-nat", {"resourceGroupName": "rg-demo", "tags": dict(TAGS), "sku": {"name": "Standard"},
                                    "publicIpAddresses": [{"id": address.id}]})
    return [address, gateway]


def data_group(**kwargs) -> PlannedResource:
    kwargs.setdefault("retain_on_delete", True)
    return res(RESOURCE_GROUP, "data-rg", {"resourceGroupName": "rg-llm-demo-data", "location": REGION,
                                           "tags": dict(TAGS)}, **kwargs)


def account(name: str = "data", *, retain: bool = True, **props) -> PlannedResource:
    base = {"accountName": f"llmdemo{name}", "resourceGroupName": "rg-llm-demo-data", "kind": "StorageV2",
            "sku": {"name": "Standard_LRS"}, "tags": dict(TAGS), "allowBlobPublicAccess": False,
            "networkRuleSet": {"defaultAction": "Deny", "ipRules": [{"iPAddressOrRange": "203.0.113.0/24"}],
                               "virtualNetworkRules": [{"virtualNetworkResourceId": "demo-compute-id"}]}}
    return res(ACCOUNT, name, {**base, **props}, retain_on_delete=retain)


def container(name: str = "datasets", *, account_name: str = "llmdemodata", retain: bool = True,
              **props) -> PlannedResource:
    return res(CONTAINER, name, {"accountName": account_name, "resourceGroupName": "rg-llm-demo-data",
                                 "containerName": name, "publicAccess": "None", **props}, retain_on_delete=retain)


BLOB = "/subscriptions/s/resourceGroups/rg-llm-demo-data/providers/Microsoft.Storage/storageAccounts/{}/" \
       "blobServices/default/containers/{}"


def lustre(**props) -> PlannedResource:
    base = {"resourceGroupName": "rg-demo", "location": REGION, "zones": ["1"], "tags": dict(TAGS),
            "sku": {"name": "AMLFS-Durable-Premium-250"}, "storageCapacityTiB": 8.0,
            "filesystemSubnet": "demo-lustre-id", "maintenanceWindow": {"dayOfWeek": "Sunday", "timeOfDayUTC": "02:00"},
            "hsm": {"settings": {"container": BLOB.format("llmdemodata", "datasets"),
                                 "loggingContainer": BLOB.format("llmdemodata", "lustre-logs")}}}
    return res(LUSTRE, "demo-lustre", {**base, **props})


def lustre_provider_roles() -> list[PlannedResource]:
    """The HPC Cache Resource Provider's two roles on the linked account (bucket-service-not-granted)."""
    scope = BLOB.format("llmdemodata", "datasets").split("/blobServices/", 1)[0]
    return [res("azure-native:authorization:RoleAssignment", f"demo-lustre-rp-{i}", {
        "scope": scope, "principalId": "22222222-2222-2222-2222-222222222222", "principalType": "ServicePrincipal",
        "roleDefinitionId": f"/subscriptions/0/providers/Microsoft.Authorization/roleDefinitions/{guid}"})
        for i, guid in enumerate(("17d1049b-9a84-46fb-8f53-869881c3d3ab", "ba92f5b4-2d11-453d-a403-e96b0029c9fe"))]


def lustre_subnet(prefix: str = "10.0.128.0/24") -> PlannedResource:
    return res(SUBNET, "demo-lustre", {"resourceGroupName": "rg-demo", "virtualNetworkName": "demo-vnet",
                                       "subnetName": "lustre", "addressPrefix": prefix})


def budget(*groups: str) -> PlannedResource:
    note = {"enabled": True, "operator": "GreaterThan", "threshold": 100.0, "contactEmails": ["ml@example.com"],
            **({"contactGroups": list(groups)} if groups else {})}
    return res(BUDGET, "demo-budget", {"scope": "/subscriptions/s/resourceGroups/rg-demo", "amount": 5000.0,
                                       "category": "Cost", "timeGrain": "Monthly", "notifications": {"actual": note},
                                       "filter": {"tags": {"name": "goldenenv:stack", "operator": "In",
                                                           "values": ["demo"]}}})


def stop_function() -> list[PlannedResource]:
    """The hard stop: an action group calling a function app (switched on, its identity allowed to deallocate the
    scale sets of rg-demo), which keeps its state in a storage account of its own, flagged as holding no data."""
    state = res(ACCOUNT, "stop-state", {"accountName": "llmdemostop", "resourceGroupName": "rg-demo",
                                        "tags": {**TAGS, "goldenenv-holds": "function-code"},
                                        "allowBlobPublicAccess": False, "publicNetworkAccess": "Disabled"})
    app = res(WEB_APP, "demo-stop", {"resourceGroupName": "rg-demo", "kind": "functionapp,linux", "tags": dict(TAGS),
                                     "siteConfig": {"appSettings": [
                                         {"name": "AzureWebJobsStorage__accountName", "value": "llmdemostop"},
                                         {"name": "GOLDENENV_HARD_STOP", "value": "true"}]}},
              outputs={"identity": {"principalId": "33333333-3333-3333-3333-333333333333"}})
    deallocate = res("azure-native:authorization:RoleAssignment", "demo-stop-compute", {
        "scope": "/subscriptions/s/resourceGroups/rg-demo", "principalId": "33333333-3333-3333-3333-333333333333",
        "principalType": "ServicePrincipal",  # Virtual Machine Contributor
        "roleDefinitionId": "/subscriptions/s/providers/Microsoft.Authorization/roleDefinitions/"
                            "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"})
    group = res(ACTION_GROUP, "demo-stop-ag", {"resourceGroupName": "rg-demo", "groupShortName": "stop",
                                               "enabled": True, "tags": dict(TAGS), "azureFunctionReceivers": [
            {"name": "stop", "functionAppResourceId": app.id, "functionName": "stop",
             "httpTriggerUrl": "https://demo-stop.azurewebsites.net/api/stop"}]})
    return [state, app, group, deallocate]


def cluster() -> list[PlannedResource]:
    compute = res(RESOURCE_GROUP, "rg", {"resourceGroupName": "rg-demo", "location": REGION, "tags": dict(TAGS)})
    return [compute, data_group(), nsg(), *nat(), scale_set(), head(), head_nic(), account(), container(),
            lustre_subnet(), lustre(), *lustre_provider_roles(), *stop_function(), budget("demo-stop-ag-id")]


IDENTITY_AND_HARDENING = frozenset({"grant-broader-than-needed", "host-not-hardened", "storage-not-hardened"})


def test_a_compliant_azure_cluster_has_no_findings():
    resources = cluster()
    # identities and host and storage hardening are judged on the shipped stacks' real plans, whose components
    # create the identities these hand-built resources only name (test_contract_least_privilege,
    # test_contract_hardening)
    assert [f for f in evaluate(resources, TAGS, hard_stop=True) if f.rule not in IDENTITY_AND_HARDENING] == []
    assert [f for f in readiness.findings(resources, TAGS) if f.severity is Severity.ERROR] == []


# ---------------------------------------------------------------- tags.py

def test_azures_tag_limits_as_documented():
    assert (tags.MAX_TAGS, tags.MAX_NAME, tags.MAX_STORAGE_ACCOUNT_NAME, tags.MAX_VALUE) == (50, 512, 128, 256)
    assert set(tags.FORBIDDEN_CHARACTERS) == set("<>%&\\?/")


def test_the_stacks_tags_are_written_unchanged():
    assert tags.tags(TAGS) == TAGS
    assert tags.problems(TAGS) == []


@pytest.mark.parametrize("name", ["team/ml", "a<b", "50%", "r&d", "back\\slash", "why?"])
def test_a_tag_name_with_a_character_azure_refuses_is_named(name):
    [problem] = tags.problems({**TAGS, name: "x"})
    assert repr(name) in problem and "refuses" in problem


@pytest.mark.parametrize("name", ["azure-team", "Azure", "WINDOWS_owner", "microsoftTeam"])
def test_a_tag_name_with_a_reserved_prefix_is_refused(name):
    [problem] = tags.problems({name: "x"})
    assert "reserves" in problem and repr(name) in problem


def test_more_than_fifty_tags_are_refused_counting_goldenenvs_own():
    extra = {f"extra-{i}": "x" for i in range(50 - len(TAGS))}
    assert tags.problems({**TAGS, **extra}) == []
    [problem] = tags.problems({**TAGS, **extra, "one-more": "x"})
    assert "51 tags" in problem and "50" in problem


def test_long_names_and_values_and_case_twins_are_refused():
    assert tags.problems({"n" * 512: "x"}) == []
    assert "512" in tags.problems({"n" * 513: "x"})[0]
    assert tags.problems({"n" * 128: "x"}, storage_account=True) == []
    assert "128" in tags.problems({"n" * 129: "x"}, storage_account=True)[0]
    assert "256" in tags.problems({"k": "v" * 257})[0]
    [twins] = tags.problems({"Project": "a", "project": "b"})
    assert "case-insensitive" in twins


# ---------------------------------------------------------------- untagged-resource

def test_azure_resources_carry_their_tags_in_tags():
    assert guardrails.tag_input(SCALE_SET) == "tags"
    assert is_taggable(SCALE_SET) and is_taggable(ACCOUNT) and is_taggable(LUSTRE) and is_taggable(NSG)
    assert is_taggable(RESOURCE_GROUP) and is_taggable(PUBLIC_IP)
    # no tags in pulumi-azure-native 3.x: subnets, standalone security rules, blob containers, budgets
    assert not is_taggable(SUBNET) and not is_taggable(SECURITY_RULE) and not is_taggable(CONTAINER)
    assert not is_taggable(BUDGET)


def test_an_untagged_scale_set_is_caught_though_its_group_is_tagged():
    group = res(RESOURCE_GROUP, "rg", {"resourceGroupName": "rg-demo", "tags": dict(TAGS)})
    bare = scale_set(tags=None)
    [finding] = found([group, bare], "untagged-resource")
    assert finding.urn == bare.urn and finding.severity is Severity.ERROR and "has no tags" not in finding.message
    assert "goldenenv:stack" in finding.message and "cost-center" in finding.message


def test_a_tag_with_another_value_is_caught():
    [finding] = found([scale_set(tags={**TAGS, "cost-center": "r-1"})], "untagged-resource")
    assert "cost-center=R-1" in finding.message


# ---------------------------------------------------------------- ssh-open-to-world, ingress-open-to-world

@pytest.mark.parametrize("rule", [
    _rule("ssh", "*"),
    _rule("ssh", "Internet"),
    _rule("ssh", "Any"),
    _rule("ssh", "0.0.0.0/0"),
    _rule("ssh", None, sourceAddressPrefixes=["203.0.113.0/24", "*"]),
    _rule("all", "*", "*", protocol="*"),
    _rule("range", "Internet", "20-30"),
    _rule("ssh", None, sourceAddressPrefixes=["11.0.0.0/8", "13.0.0.0/8"]),
    _rule("ssh", "AzureCloud"),  # every Azure datacenter address: no range the rules can measure
], ids=["star", "internet-tag", "any", "cidr", "prefixes", "all-protocols", "port-range", "two-/8s", "azurecloud"])
def test_an_nsg_opening_ssh_to_the_world_is_caught(rule):
    group = nsg(rule)
    [finding] = found([group], "ssh-open-to-world")
    assert finding.urn == group.urn and finding.severity is Severity.ERROR and "demo-nsg" in finding.message


@pytest.mark.parametrize("rule", [
    _rule("ssh-admin"),                                                        # an admin /24
    _rule("deny", "*", "*", protocol="*", access="Deny"),
    _rule("out", "*", direction="Outbound"),
    _rule("vnet", "VirtualNetwork", "*", protocol="*"),
    _rule("probe", "AzureLoadBalancer", "*"),
    _rule("https", "Internet", "443"),
    _rule("udp", "*", protocol="Udp"),
])
def test_an_nsg_closed_to_the_world_on_ssh_passes(rule):
    assert found([nsg(rule)], "ssh-open-to-world") == []


def test_a_standalone_security_rule_opening_ssh_is_caught():
    rule = res(SECURITY_RULE, "open-ssh", {**_rule("open", "*"), "networkSecurityGroupName": "demo-compute",
                                           "resourceGroupName": "rg-demo"})
    [finding] = found([nsg(), rule], "ssh-open-to-world")
    assert finding.urn == rule.urn


def test_other_ports_open_to_the_internet_are_a_warning():
    [finding] = found([nsg(_rule("jupyter", "Internet", "8888"))], "ingress-open-to-world")
    assert finding.severity is Severity.WARNING and "tcp 8888-8888 from 0.0.0.0/0" in finding.message


def test_the_cluster_is_let_in_by_the_virtual_network_tag_not_by_a_cidr():
    """An address range reaching slurmctld's port is beyond the cluster, even the VNet's own CIDR."""
    [finding] = found([nsg(_rule("vnet", "10.0.0.0/16", "*", protocol="*"))], "slurmctld-beyond-cluster")
    assert "6817" in finding.message
    assert found([nsg()], "slurmctld-beyond-cluster") == []


# ---------------------------------------------------------------- public-ip-on-gpu-node, public-ip-on-head

def test_a_public_ip_on_a_scale_set_is_caught():
    public = scale_set(profile={"networkProfile": {"networkInterfaceConfigurations": [{"name": "eth0",
        "ipConfigurations": [{"name": "ipv4", "subnet": {"id": "s"}, "publicIPAddressConfiguration": {
            "name": "pub", "publicIPAddressVersion": "IPv6"}}]}]}})
    [finding] = found([public], "public-ip-on-gpu-node")
    assert finding.urn == public.urn and "eth0/ipv4" in finding.message and "IPv6" in finding.message


def test_a_public_ip_on_a_nic_is_caught():
    nic = head_nic(publicIPAddress={"id": "some-ip-id"})
    [finding] = found([nic], "public-ip-on-gpu-node")
    assert finding.urn == nic.urn and "publicIPAddress" in finding.message


def test_a_public_address_elsewhere_than_the_nat_gateway_is_caught():
    address, gateway = nat()
    assert found([address, gateway], "public-ip-on-gpu-node") == []
    loose = res(PUBLIC_IP, "bastion-ip", {"sku": {"name": "Standard"}, "tags": dict(TAGS)})
    [finding] = found([address, gateway, loose], "public-ip-on-gpu-node")
    assert finding.urn == loose.urn and "NAT gateway" in finding.message


def test_private_nodes_pass():
    assert found([scale_set(), head(), head_nic(), *nat()], "public-ip-on-gpu-node") == []


def test_the_head_says_it_takes_no_public_ip():
    assert found([head()], "public-ip-on-head") == []
    public = head({"networkInterfaceConfigurations": [{"name": "eth0", "ipConfigurations": [
        {"name": "ipv4", "publicIPAddressConfiguration": {"name": "pub"}}]}]})
    [finding] = found([public], "public-ip-on-head")
    assert "Slurm head" in finding.message
    assert found([head({})], "public-ip-on-head")  # no network profile says nothing


# ---------------------------------------------------------------- s3-public-access: Blob storage

@pytest.mark.parametrize("props,words", [
    ({"allowBlobPublicAccess": True}, "allowBlobPublicAccess true"),
    ({"allowBlobPublicAccess": None}, "allowBlobPublicAccess unset"),
    ({"networkRuleSet": None}, "any internet address"),
    ({"networkRuleSet": {"defaultAction": "Allow"}, "publicNetworkAccess": "Enabled"}, "any internet address"),
])
def test_a_storage_account_open_to_the_public_is_caught(props, words):
    data = account(**props)
    [finding] = found([data], "s3-public-access")
    assert finding.urn == data.urn and words in finding.message and finding.severity is Severity.ERROR


@pytest.mark.parametrize("access", ["Blob", "Container"])
def test_a_public_container_is_caught(access):
    public = container(publicAccess=access)
    [finding] = found([account(), public], "s3-public-access")
    assert finding.urn == public.urn and f"publicAccess {access}" in finding.message


def test_a_function_apps_own_account_may_take_internet_connections_but_no_anonymous_reads():
    state, app, *_ = stop_function()
    open_state = res(ACCOUNT, state.name, {**state.props, "publicNetworkAccess": None})
    assert found([open_state, app], "s3-public-access") == []
    unflagged = res(ACCOUNT, state.name, {**open_state.props, "tags": dict(TAGS)})
    assert found([unflagged, app], "s3-public-access")  # named by the app but not flagged: it may hold data
    anonymous = res(ACCOUNT, state.name, {**open_state.props, "allowBlobPublicAccess": True})
    [finding] = found([anonymous, app], "s3-public-access")
    assert "allowBlobPublicAccess true" in finding.message


def test_a_private_account_and_container_pass():
    assert found([account(), container(), account("off", networkRuleSet=None, publicNetworkAccess="Disabled")],
                 "s3-public-access") == []


# ---------------------------------------------------------------- data stores, encryption, metadata

def test_the_data_account_its_containers_and_their_group_are_retained():
    for dropped in (account(retain=False), container(retain=False), data_group(retain_on_delete=False)):
        others = [r for r in (data_group(), account(), container()) if r.type != dropped.type]
        [finding] = found([*others, dropped], "data-store-not-retained")
        assert finding.urn == dropped.urn, dropped.type
    assert found([data_group(), account(), container()], "data-store-not-retained") == []


def test_a_group_holding_no_data_store_and_the_functions_own_account_need_no_retention():
    compute = res(RESOURCE_GROUP, "rg", {"resourceGroupName": "rg-demo", "tags": dict(TAGS)})
    assert found([compute, *stop_function()], "data-store-not-retained") == []
    state = stop_function()[0]
    unflagged = res(ACCOUNT, state.name, {**state.props, "tags": dict(TAGS)})
    assert found([compute, unflagged, *stop_function()[1:]], "data-store-not-retained")  # named, not flagged


def test_managed_lustre_is_the_working_copy_linked_to_blob():
    assert found([lustre()], "data-store-not-retained") == []
    [finding] = found([lustre(hsm=None)], "data-store-not-retained")
    assert "hsm.settings.container" in finding.message


def test_azure_encrypts_at_rest_and_its_metadata_service_has_no_tokenless_mode():
    resources = [scale_set(), head(), account(), lustre()]
    for rule in ("unencrypted-storage", "unencrypted-topic", "imdsv1-allowed"):
        assert found(resources, rule) == [], rule


# ---------------------------------------------------------------- budget-not-planned

def test_a_plan_with_nodes_but_no_budget_is_caught():
    [finding] = found([scale_set(), head()], "budget-not-planned")
    assert "2 azure-native instance(s)" in finding.message and "goldenenv:budget" in finding.message
    assert found([scale_set()], "budget-not-planned", budget_opt_out=True) == []
    assert found([scale_set(), budget()], "budget-not-planned") == []


def test_a_hard_stop_needs_an_action_group_that_runs_a_planned_function():
    [no_route] = found([scale_set(), budget()], "budget-not-planned", hard_stop=True)
    assert "hard stop" in no_route.message
    [missing] = found([scale_set(), budget("/subscriptions/s/actionGroups/gone")], "budget-not-planned")
    assert "no action group of the plan" in missing.message
    state, app, group, _ = stop_function()
    mail_only = res(ACTION_GROUP, "demo-stop-ag", {"groupShortName": "stop", "emailReceivers": [
        {"name": "ml", "emailAddress": "ml@example.com"}]})
    [notify] = found([scale_set(), budget(mail_only.id), mail_only], "budget-not-planned")
    assert "only notifies people" in notify.message
    [no_app] = found([scale_set(), budget(group.id), group], "budget-not-planned")
    assert "function app" in no_app.message
    assert found([scale_set(), budget(group.id), state, app, group], "budget-not-planned", hard_stop=True) == []


# ---------------------------------------------------------------- readiness (plan --strict)

def test_azures_limits_as_documented():
    assert readiness.MAX_PLACEMENT_GROUP == 100
    assert readiness.LUSTRE_SKUS["AMLFS-Durable-Premium-40"] == readiness.LustreSku(48, 48)
    assert readiness.LUSTRE_SKUS["AMLFS-Durable-Premium-500"] == readiness.LustreSku(4, 4)
    assert readiness.subnet_prefix_needed(16) == 27 and readiness.subnet_prefix_needed(400) == 23
    assert readiness.quota_family(H100).quota == "Standard NDSH100v5 Family vCPUs"
    assert readiness.quota_family(T4).quota == "Standard NCASv3_T4 Family vCPUs"


def test_the_catalogs_infiniband_sizes_are_read_as_such():
    assert catalog.instance_types("azure")[H100].rdma == "ib" and readiness.is_infiniband(H100)
    assert not readiness.is_infiniband(T4)
    assert readiness.is_infiniband("Standard_HB120rs_v3")  # not in the catalog: its `r` says RDMA


@pytest.mark.parametrize("props,words", [
    ({"singlePlacementGroup": False}, "singlePlacementGroup false"),
    ({"singlePlacementGroup": None}, "singlePlacementGroup unset"),
    ({"orchestrationMode": "Flexible"}, "orchestrationMode 'Flexible'"),
    ({"platformFaultDomainCount": 5.0}, "platformFaultDomainCount 5"),
    ({"overprovision": None}, "overprovision unset"),
])
def test_an_infiniband_scale_set_outside_one_fabric_is_refused(props, words):
    [message] = strict([scale_set(**props)], "strict:azure-infiniband-scale-set")
    assert words in message and "InfiniBand" in message


def test_a_scale_set_of_a_size_without_infiniband_may_spread():
    spread = scale_set(vm_size=T4, singlePlacementGroup=False, platformFaultDomainCount=None, overprovision=None)
    assert strict([spread], "strict:azure-infiniband-scale-set") == []


def test_a_single_placement_group_holds_at_most_100_vms():
    assert strict([scale_set(count=100)], "strict:azure-placement-group") == []
    [message] = strict([scale_set(count=101)], "strict:azure-placement-group")
    assert "101 VMs" in message and "at most 100" in message


@pytest.mark.parametrize("reference,words", [
    ({"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}, "latest"),
    ({"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204"}, "no version"),
    ({"id": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/galleries/g/images/hpc"}, "latest"),
    ({"id": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/galleries/g/images/hpc/versions/latest"},
     "latest"),
])
def test_an_unpinned_image_is_refused(reference, words):
    unpinned = scale_set(profile={"storageProfile": {"imageReference": reference}})
    [message] = strict([unpinned], "strict:azure-image-version")
    assert words in message and "pin" in message


def test_a_pinned_image_passes():
    gallery = {"id": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/galleries/g/images/hpc/"
                     "versions/1.2.3"}
    for node in (scale_set(), scale_set(profile={"storageProfile": {"imageReference": gallery}})):
        assert strict([node], "strict:azure-image-version") == []


def test_spot_scale_sets_deallocate_and_pay_up_to_on_demand():
    good = {"priority": "Spot", "evictionPolicy": "Deallocate", "billingProfile": {"maxPrice": -1.0}}
    assert strict([scale_set(profile=good)], "strict:azure-spot") == []
    assert strict([scale_set(profile={"priority": "Spot"})], "strict:azure-spot") == []  # Azure's defaults
    [delete] = strict([scale_set(profile={**good, "evictionPolicy": "Delete"})], "strict:azure-spot")
    assert "Deallocate" in delete
    [capped] = strict([scale_set(profile={**good, "billingProfile": {"maxPrice": 0.5}})], "strict:azure-spot")
    assert "0.5" in capped and "-1" in capped


@pytest.mark.parametrize("props,words", [
    ({"sku": {"name": "AMLFS-Durable-Premium-1000"}}, "none of AMLFS-Durable-Premium-40"),
    ({"storageCapacityTiB": 10.0}, "not a multiple of 8 TiB"),
    ({"sku": {"name": "AMLFS-Durable-Premium-40"}, "storageCapacityTiB": 24.0}, "from 48 TiB"),
    ({"zones": ["1", "2"]}, "exactly one zone"),
    ({"zones": None}, "exactly one zone"),
    ({"maintenanceWindow": None}, "maintenanceWindow.dayOfWeek"),
    ({"maintenanceWindow": {"dayOfWeek": "Sunday", "timeOfDayUTC": "25:00"}}, "timeOfDayUTC"),
    ({"hsm": {"settings": {"container": BLOB.format("a", "c"), "loggingContainer": BLOB.format("a", "c")}}},
     "another container"),
    ({"hsm": {"settings": {"container": BLOB.format("a", "c"), "loggingContainer": BLOB.format("b", "l")}}},
     "same account"),
    ({"hsm": {"settings": {"container": BLOB.format("a", "c"), "loggingContainer": BLOB.format("a", "l"),
                           "importPrefix": "/", "importPrefixesInitial": ["/"]}}}, "keep one"),
])
def test_managed_lustre_settings_azure_refuses_are_named(props, words):
    [message] = strict([lustre_subnet(), lustre(**props)], "strict:azure-lustre")
    assert words in message


def test_managed_lustre_sizes_its_skus_take_pass():
    for sku, tib in (("AMLFS-Durable-Premium-40", 96.0), ("AMLFS-Durable-Premium-125", 16.0),
                     ("AMLFS-Durable-Premium-500", 4.0)):
        assert strict([lustre_subnet(), lustre(sku={"name": sku}, storageCapacityTiB=tib)],
                      "strict:azure-lustre") == [], sku


@pytest.mark.parametrize("tib,prefix,refused", [
    (8.0, "10.0.128.0/27", False), (8.0, "10.0.128.0/28", True),
    (200.0, "10.0.128.0/23", False), (200.0, "10.0.128.0/24", True),
])
def test_the_lustre_subnet_is_large_enough_for_the_capacity(tib, prefix, refused):
    messages = strict([lustre_subnet(prefix), lustre(storageCapacityTiB=tib)], "strict:azure-lustre")
    assert bool(messages) is refused
    if refused:
        assert prefix.split("/")[1] in messages[0] and "subnet" in messages[0]


def test_lustre_in_another_zone_than_the_nodes_is_a_warning():
    [finding] = [f for f in readiness.findings([lustre(zones=["2"]), scale_set()], TAGS)
                 if f.rule == "strict:azure-lustre-zone"]
    assert finding.severity is Severity.WARNING and "zone 2" in finding.message
    assert strict([lustre(), scale_set()], "strict:azure-lustre-zone") == []


def test_tags_azure_refuses_are_caught_on_each_resource():
    assert strict(cluster(), "strict:azure-tag-limits") == []
    [slash] = strict([scale_set(tags={**TAGS, "team/ml": "x"})], "strict:azure-tag-limits")
    assert "'team/ml'" in slash
    [reserved] = strict([scale_set(tags={**TAGS, "azure-team": "x"})], "strict:azure-tag-limits")
    assert "'azure-team'" in reserved
    many = {**TAGS, **{f"extra-{i}": "x" for i in range(51 - len(TAGS))}}
    [count] = strict([scale_set(tags=many)], "strict:azure-tag-limits")
    assert "51 tags" in count
    [long_name] = strict([account(tags={**TAGS, "n" * 129: "x"})], "strict:azure-tag-limits")
    assert "128" in long_name


def test_a_size_not_sold_in_the_region_or_zone_is_refused():
    sold = catalog.type_zones("azure", H100)
    assert REGION in sold and "westus3" not in sold
    assert strict([scale_set()], "strict:azure-size-zone") == []
    [region] = strict([scale_set(location="westus3")], "strict:azure-size-zone")
    assert "westus3" in region and REGION in region
    [zone] = strict([scale_set(zones=["4"])], "strict:azure-size-zone")
    assert "zone(s) 4" in zone
    assert strict([scale_set(vm_size="Standard_Unknown_v9")], "strict:azure-size-zone") == []  # no catalog row


def test_a_budget_alerting_action_groups_is_scoped_to_a_subscription_or_group():
    assert strict([budget("ag-id")], "strict:azure-budget-scope") == []
    billing = res(BUDGET, "b", {**budget("ag-id").props, "scope": "/providers/Microsoft.Billing/billingAccounts/1"})
    [message] = strict([billing], "strict:azure-budget-scope")
    assert "Subscription or Resource Group" in message


def test_gpu_quota_is_named_per_family_region_and_market():
    vcpus = catalog.instance_types("azure")[H100].vcpus
    spot = {"priority": "Spot", "evictionPolicy": "Deallocate"}
    nodes = [scale_set("a", count=2), scale_set("b", count=1), scale_set("c", count=3, profile=spot)]
    messages = strict(nodes, "strict:azure-gpu-quota")
    assert len(messages) == 2
    assert f"{3 * vcpus} vCPUs of quota \"Standard NDSH100v5 Family vCPUs\" in eastus" in messages[0]
    assert "Total Regional vCPUs" in messages[0] and "standardNDSH100v5Family" in messages[0]
    assert f"{3 * vcpus} vCPUs of quota \"Total Regional Spot vCPUs\" in eastus" in messages[1]
    [unknown] = strict([scale_set(vm_size="Standard_ND40rs_v2")], "strict:azure-gpu-quota")
    assert "unverified" in unknown and "az vm list-skus" in unknown


def test_readiness_rules_have_unique_strict_ids():
    ids = [rule.id for rule in readiness.RULES]
    assert len(ids) == len(set(ids)) and all(i.startswith("strict:azure-") for i in ids)

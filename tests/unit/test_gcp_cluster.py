"""The Google Cloud program under Pulumi's mock runtime: what `pulumi up` would create, checked offline.

Expected counts, MTUs, prices and drivers come from the catalog; a few literal anchors from Google's public tables
(A3 Mega: 8 GPU NICs on 8 GPU VPCs; A3 Ultra: 8 MRDMA NICs on a RoCE network of 8 subnets) make a wrong row fail.
"""

from __future__ import annotations

import copy

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import catalog, compat, fabrics, stackconfig
from goldenenv.cli import app
from goldenenv.plan import plan, plan_config, stack_file
from goldenenv.spec import ConfigError

INSTANCE = "gcp:compute/instance:Instance"
NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
BUCKET = "gcp:storage/bucket:Bucket"
LUSTRE = "gcp:lustre/instance:Instance"
BUDGET = "gcp:billing/budget:Budget"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
TRAINING, DEV = "gcp-a3mega-2node", "gcp-g2-dev"
EXAMPLES = [TRAINING, DEV]
A3MEGA, A3ULTRA = "a3-megagpu-8g", "a3-ultragpu-8g"
PUSHED = "us-central1-docker.pkg.dev/goldenenv-plan-000000/images/train@sha256:" + "a" * 64
runner = CliRunner()

# The provider takes these strings without checking them client-side; the valid values are the Compute API's.
VALID = {
    "provisioningModel": {"STANDARD", "SPOT", "FLEX_START", "RESERVATION_BOUND"},
    "onHostMaintenance": {"MIGRATE", "TERMINATE"},
    "instanceTerminationAction": {"STOP", "DELETE"},
    "nicType": {"GVNIC", "VIRTIO_NET", "IDPF", "MRDMA", "IRDMA"},
    "collocation": {"COLLOCATED", "UNSPECIFIED_COLLOCATION"},
    "direction": {"INGRESS", "EGRESS"},
    "routingMode": {"REGIONAL", "GLOBAL"},
}


def nodes(p) -> list:
    """The pools' nodes: every instance but the Slurm head."""
    return [r for r in p.of_type(INSTANCE) if not r.name.endswith("-head")]


def config(stack: str = TRAINING, **node_changes) -> dict:
    found = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    found["goldenenv:nodes"].update(node_changes)
    return found


def by_id(p, type_token) -> dict:
    return {r.id: r for r in p.of_type(type_token)}


@pytest.fixture(scope="module")
def training():
    return plan(TRAINING)


@pytest.fixture(scope="module")
def ultra():
    found = config(instanceType=A3ULTRA)
    found["goldenenv:zone"] = catalog.type_zones("gcp", A3ULTRA)["us-central1"][0]
    found["goldenenv:image"] = {"lock": "gcp-h200"}
    return plan_config("gcp-a3ultra-2node", found)


@pytest.mark.parametrize("stack", EXAMPLES)
def test_example_stacks_plan_without_failed_guardrails_even_strict(stack):
    result = plan(stack, strict=True)
    assert not result.failed, [f"{f.rule} {f.resource}: {f.message}" for f in result.findings
                               if f.severity.value == "error"]


def test_a3mega_nodes_have_eight_gpu_nics_on_eight_gpu_vpcs_plus_the_system_vpc(training):
    it = catalog.instance_type("gcp", A3MEGA)
    assert it.rdma == "tcpxo" and it.rdma_interfaces == 8  # Google's A3 Mega: 8 GPU NICs, GPUDirect-TCPXO
    mtu = fabrics.get("tcpxo").mtu("gcp", A3MEGA).mtu
    subnets, networks = by_id(training, SUBNET), by_id(training, NETWORK)
    assert len(nodes(training)) == 2
    for node in nodes(training):
        nics = node.props["networkInterfaces"]
        assert len(nics) == it.network_cards + it.rdma_interfaces == 9
        assert all(nic["nicType"] == "GVNIC" for nic in nics)
        assert all(not nic.get("accessConfigs") and not nic.get("ipv6AccessConfigs") for nic in nics)
        gpu_networks = {subnets[nic["subnetwork"]].props["network"] for nic in nics[1:]}
        assert len(gpu_networks) == 8
        assert {networks[n].props["mtu"] for n in gpu_networks} == {mtu} == {8244}
        assert subnets[nics[0]["subnetwork"]].props["network"] not in gpu_networks
        assert subnets[nics[0]["subnetwork"]].props["privateIpGoogleAccess"] is True


def test_nodes_share_one_collocated_placement_policy(training):
    policy = training.of_type(POLICY)
    assert len(policy) == 1
    placement = policy[0].props["groupPlacementPolicy"]
    assert placement == {"collocation": "COLLOCATED"}, "no vmCount: each node is its own insert (issue 33 item 6)"
    assert {n.props["resourcePolicies"] for n in nodes(training)} == {policy[0].outputs["selfLink"]}


def test_a3ultra_plans_the_roce_network_profile_with_eight_mrdma_nics(ultra):
    it = catalog.instance_type("gcp", A3ULTRA)
    assert it.rdma == "gib" and it.rdma_interfaces == 8 and it.network_cards == 2
    roce = [n for n in ultra.of_type(NETWORK) if n.props.get("networkProfile")]
    assert len(roce) == 1
    zone = ultra.spec.zone
    assert roce[0].props["networkProfile"].endswith(f"/global/networkProfiles/{zone}-vpc-roce")
    assert roce[0].props["mtu"] == fabrics.get("gib").mtu("gcp", A3ULTRA).mtu == 8896
    roce_subnets = [s for s in ultra.of_type(SUBNET) if s.props["network"] == roce[0].id]
    assert len(roce_subnets) == 8
    for node in nodes(ultra):
        nics = node.props["networkInterfaces"]
        assert [n["nicType"] for n in nics] == ["GVNIC"] * 2 + ["MRDMA"] * 8
        assert {n["subnetwork"] for n in nics[2:]} == {s.id for s in roce_subnets}
    # the profile's network admits its members itself: no firewall rule names it
    assert not [f for f in ultra.of_type(FIREWALL) if f.props["network"] == roce[0].id]


def test_the_bucket_and_lustre_instance_are_planned_and_the_budget_stops_the_nodes(training):
    bucket = [b for b in training.of_type(BUCKET) if b.props["name"] == training.outputs["bucket"]]
    assert len(bucket) == 1 and bucket[0].retain_on_delete
    assert bucket[0].props["uniformBucketLevelAccess"] is True
    assert bucket[0].props["publicAccessPrevention"] == "enforced"
    lustre = training.of_type(LUSTRE)
    assert len(lustre) == 1
    fs = training.spec.storage.parallel_fs
    assert int(lustre[0].props["capacityGib"]) == fs.size_gib
    assert int(lustre[0].props["perUnitStorageThroughput"]) == fs.throughput_per_tib
    assert len(training.of_type(BUDGET)) == 1 and len(training.of_type(FUNCTION)) == 1
    assert training.outputs["budgetFunction"]


def test_cost_per_hour_comes_from_the_catalog(training):
    price = catalog.price("gcp", A3MEGA, "us-central1")
    compute = [line for line in training.lines if line.name == f"compute {training.spec.nodes[0].name}"]
    assert compute and compute[0].amount == pytest.approx(2 * price.usd_per_hour)
    assert training.usd_per_hour > 2 * price.usd_per_hour


def test_the_lock_is_checked_against_the_host_images_driver(training):
    (checked,) = training.compat
    image = compat.node_host("gcp", "us-central1", None).image
    assert image is not None and checked.host.driver == image.nvidia_driver
    assert checked.lock == "gcp-h100" and checked.ok and checked.driver_level == "full"


def test_plan_command_shows_nodes_nics_placement_storage_budget_and_cost(tmp_path):
    result = runner.invoke(app, ["plan", "-s", TRAINING], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert result.output.count("nics=9 (9 GVNIC)") == 2
    assert "collocation=COLLOCATED" in result.output
    assert LUSTRE in result.output and BUDGET in result.output
    price = catalog.price("gcp", A3MEGA, "us-central1")
    assert f"{2 * price.usd_per_hour:,.2f}" in result.output
    assert "no guardrail failed" in result.output


@pytest.mark.parametrize("stack", EXAMPLES)
def test_enum_strings_are_ones_the_compute_api_takes(stack):
    result = plan(stack)

    def walk(value, key=None):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(v, k)
        elif isinstance(value, list):
            for v in value:
                yield from walk(v, key)
        elif key in VALID:
            yield key, value

    found = [(r.name, k, v) for r in result.resources if r.type.startswith("gcp:compute/")
             for k, v in walk(r.props)]
    assert found
    assert [f for f in found if f[2] not in VALID[f[1]]] == []


def test_gpu_nodes_terminate_on_host_maintenance_and_spot_stops_when_preempted():
    spot = plan_config(TRAINING, config(capacity="spot"))
    for node in nodes(spot):
        scheduling = node.props["scheduling"]
        assert scheduling["onHostMaintenance"] == "TERMINATE"
        assert scheduling["provisioningModel"] == "SPOT"
        assert scheduling["instanceTerminationAction"] == "STOP"
    assert any("preempt" in note for f in spot.findings for note in [f.message])


def test_every_labelled_resource_carries_the_stack_labels(training):
    wanted = {"goldenenv_stack": TRAINING, "project": "llm-pretrain", "cost-center": "research-1234"}
    # a notification channel's `labels` are its address; its resource labels are userLabels
    held = {r.name: r.props.get("userLabels" if r.type.startswith("gcp:monitoring/") else "labels")
            for r in training.resources if r.custom}
    labelled = {name: found for name, found in held.items() if found is not None}
    assert len(labelled) > 10
    for name, found in labelled.items():
        assert wanted.items() <= found.items(), name


def test_no_ssh_from_the_internet_and_the_cluster_admits_only_its_own_hosts(training):
    for rule in training.of_type(FIREWALL):
        assert "0.0.0.0/0" not in (rule.props.get("sourceRanges") or [])
    internal = [r for r in training.of_type(FIREWALL) if r.props.get("sourceTags")]
    tags = {tag for node in training.of_type(INSTANCE) for tag in node.props["tags"]}
    assert len(tags) == 1 and all(r.props["sourceTags"] == list(tags) for r in internal)


def test_nodes_boot_the_golden_container_from_cloud_init_user_data(training):
    for node in nodes(training):
        metadata = node.props["metadata"]
        doc = yaml.safe_load(metadata["user-data"])
        assert doc["write_files"] and metadata["enable-oslogin"] == "TRUE"
        assert metadata["serial-port-enable"] == "FALSE"


@pytest.mark.parametrize("changes, key", [
    ({"goldenenv:zone": "us-central1-z"}, "goldenenv:zone"),
    ({"goldenenv:region": "US-Central1"}, "goldenenv:region"),
    ({"goldenenv:budget": {"monthlyLimit": 100, "currency": "EUR", "emails": ["a@example.com"]}},
     "goldenenv:budget.currency"),
])
def test_bad_input_names_the_key_and_exits_2(tmp_path, changes, key):
    doc = yaml.safe_load(stack_file(TRAINING).read_text())
    doc["config"].update(changes)
    (tmp_path / stack_file(TRAINING).name).write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["plan", "-s", TRAINING, "--stacks-dir", str(tmp_path)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert key in result.output and "Traceback" not in result.output


def test_a_reservation_bound_pool_consumes_its_reservation_by_name_without_a_placement_policy():
    reserved = plan_config(TRAINING, config(capacity="capacity-reservation", capacityReservationId="a3mega-res-1"))
    for node in nodes(reserved):
        assert node.props["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
        affinity = node.props["reservationAffinity"]
        assert affinity["type"] == "SPECIFIC_RESERVATION"
        assert affinity["specificReservation"]["values"] == ["a3mega-res-1"]
    assert reserved.of_type(POLICY) == []
    assert not reserved.failed


def test_a_reservation_name_is_refused_on_aws_which_takes_only_ec2_ids():
    aws = copy.deepcopy(stackconfig.read_stack_file(stack_file("aws-p5-2node")))
    aws["goldenenv:nodes"].update(capacity="capacity-reservation", capacityReservationId="a3mega-res-1")
    with pytest.raises(ConfigError) as refused:
        plan_config("aws-p5-2node", aws)
    (problem,) = refused.value.problems
    assert problem.key == "goldenenv:nodes.capacityReservationId" and "cr-" in problem.message


def test_the_head_imports_the_bucket_into_lustre_once_without_holding_up_slurmctld():
    pushed = config()
    pushed["goldenenv:image"] = {"lock": "gcp-h100", "ref": PUSHED}
    training = plan_config(TRAINING, pushed)
    (head,) = [r for r in training.of_type(INSTANCE) if r.name.endswith("-head")]
    files = {f["path"]: f["content"] for f in yaml.safe_load(head.props["metadata"]["user-data"])["write_files"]}
    seed = next(content for path, content in files.items() if path.endswith("goldenenv-sharedfs-seed.service"))
    script = next(content for path, content in files.items() if path.endswith("lustre-import-gcp.sh"))
    assert "Requires=goldenenv-sharedfs.service" in seed
    assert ":importData" in script and f"gs://{training.outputs['bucket']}" in script
    container = next(content for path, content in files.items() if path.endswith("goldenenv-container.service"))
    assert "goldenenv-sharedfs-seed" not in container
    role = [r for r in training.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")
            if "lustre" in r.props["roleId"]]
    assert len(role) == 1 and sorted(role[0].props["permissions"]) == [
        "lustre.instances.get", "lustre.instances.importData", "lustre.operations.get"]


def test_a_rolled_node_is_replaced_onto_the_new_boot_script_and_the_others_keep_theirs():
    from goldenenv.clouds import BuildContext
    from goldenenv.plan import offline_context

    spec = plan(TRAINING).spec
    context = BuildContext(lookup=offline_context(spec).lookup, roll_nodes=frozenset({"gpu-1"}))
    rolled = {n.name: n for n in nodes(plan(TRAINING, context=context))}
    kept, replaced = rolled[f"{TRAINING}-gpu-0"], rolled[f"{TRAINING}-gpu-1"]
    assert list(kept.ignore_changes) == ["metadata"]
    assert not replaced.ignore_changes


def _pools(*pools: dict) -> dict:
    found = config()
    found["goldenenv:nodes"] = list(pools)
    return found


def test_a_pool_without_the_gpu_network_sits_on_the_host_network_beside_the_fabric_pool():
    mixed = plan_config(TRAINING, _pools({"name": "gpu", "instanceType": A3MEGA, "count": 2},
                                         {"name": "dev", "instanceType": "g2-standard-8", "count": 1}))
    nics = {n.name: n.props["networkInterfaces"] for n in nodes(mixed)}
    assert len(nics[f"{TRAINING}-dev-0"]) == 1 and len(nics[f"{TRAINING}-gpu-0"]) == 9
    assert len([n for n in mixed.of_type(NETWORK)]) == 9


@pytest.mark.parametrize("changes, key", [
    (_pools({"name": "mega", "instanceType": A3MEGA, "count": 2},
            {"name": "ultra", "instanceType": A3ULTRA, "count": 2}), "goldenenv:nodes"),
    ({**config(), "goldenenv:network": {"cidr": "10.42.0.0/20"}}, "goldenenv:network.cidr"),
])
def test_a_stack_the_networks_cannot_hold_is_refused_naming_the_key(changes, key):
    with pytest.raises(ConfigError) as refused:
        plan_config(TRAINING, changes)
    assert key in [p.key for p in refused.value.problems], refused.value.problems

"""The Alibaba Cloud program under Pulumi's mock runtime: what `pulumi up` would create, checked offline."""

from __future__ import annotations

import base64
import copy
import json

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import catalog, clouds, stackconfig
from goldenenv.cli import app
from goldenenv.clouds.alicloud import guard
from goldenenv.clouds.alicloud.erdma import eri_layout
from goldenenv.guardrails import is_taggable
from goldenenv.plan import plan, plan_config, stack_file
from goldenenv.spec import STACK_TAG_KEY

INSTANCE = "alicloud:ecs/instance:Instance"
DEPLOYMENT_SET = "alicloud:ecs/ecsDeploymentSet:EcsDeploymentSet"
SECURITY_GROUP = "alicloud:ecs/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "alicloud:ecs/securityGroupRule:SecurityGroupRule"
TRAINING, DEV = "alicloud-ebmgn8v-2node", "alicloud-gn7i-dev"
EXAMPLES = [TRAINING, DEV]
EBMGN8V = "ecs.ebmgn8v.48xlarge"
PUSHED = "registry-vpc.cn-wulanchabu.aliyuncs.com/goldenenv-llm-pretrain/train@sha256:" + "a" * 64
runner = CliRunner()

# The provider takes these strings without checking them client-side (FACTS.md); the valid values are the ones
# pulumi-alicloud 4.0.0 documents for each input.
VALID = {
    (INSTANCE, "instanceChargeType"): {"PrePaid", "PostPaid"},
    (INSTANCE, "spotStrategy"): {"NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo"},
    (INSTANCE, "spotInterruptionBehavior"): {"Terminate", "Stop"},
    (INSTANCE, "networkInterfaceTrafficMode"): {"Standard", "HighPerformance"},
    (INSTANCE, "httpTokens"): {"optional", "required"},
    (INSTANCE, "httpEndpoint"): {"enabled", "disabled"},
    (INSTANCE, "systemDiskCategory"): {"ephemeral_ssd", "cloud_efficiency", "cloud_ssd", "cloud_essd", "cloud",
                                       "cloud_auto", "cloud_essd_entry"},
    (DEPLOYMENT_SET, "strategy"): {"Availability", "AvailabilityGroup", "LowLatency"},
    (SECURITY_GROUP, "innerAccessPolicy"): {"Accept", "Drop"},
    (SECURITY_GROUP_RULE, "type"): {"ingress", "egress"},
    (SECURITY_GROUP_RULE, "nicType"): {"internet", "intranet"},
    (SECURITY_GROUP_RULE, "policy"): {"accept", "drop"},
    ("alicloud:vpc/natGateway:NatGateway", "natType"): {"Enhanced"},
    ("alicloud:vpc/natGateway:NatGateway", "networkType"): {"internet", "intranet"},
    ("alicloud:vpc/natGateway:NatGateway", "paymentType"): {"PayAsYouGo"},
    ("alicloud:ecs/eipAddress:EipAddress", "paymentType"): {"Subscription", "PayAsYouGo"},
    ("alicloud:ecs/eipAddress:EipAddress", "internetChargeType"): {"PayByBandwidth", "PayByTraffic"},
    ("alicloud:ecs/eipAssociation:EipAssociation", "instanceType"): {"Nat", "SlbInstance", "EcsInstance",
                                                                      "NetworkInterface", "HaVip"},
    ("alicloud:ram/rolePolicyAttachment:RolePolicyAttachment", "policyType"): {"System", "Custom"},
}
SECONDARY_VALID = {"networkInterfaceTrafficMode": {"Standard", "HighPerformance"}}


def gpu_nodes(p) -> list:
    """The pools' nodes: every instance but the Slurm head (<stack>-head)."""
    return [r for r in p.of_type(INSTANCE) if not r.name.endswith("-head")]


def example_config(stack: str = TRAINING) -> dict:
    return stackconfig.read_stack_file(stack_file(stack))


def with_nodes(stack: str = TRAINING, **changes) -> dict:
    config = copy.deepcopy(example_config(stack))
    config["goldenenv:nodes"].update(changes)
    return config


def one(p, type_token):
    found = p.of_type(type_token)
    assert len(found) == 1, f"expected one {type_token}, found {len(found)}"
    return found[0]


def eris(node) -> list[dict]:
    """A planned node's ERIs: its primary interface and its one inline secondary, where HighPerformance."""
    interfaces = [node.props, node.props.get("networkInterfaces") or {}]
    return [i for i in interfaces if i.get("networkInterfaceTrafficMode") == "HighPerformance"]


def user_data(node) -> tuple[dict, dict[str, str]]:
    doc = yaml.safe_load(base64.b64decode(node.props["userData"]).decode())
    return doc, {f["path"]: f["content"] for f in doc["write_files"]}


@pytest.fixture(scope="module")
def training():
    return plan(TRAINING)


@pytest.fixture(scope="module")
def dev():
    return plan(DEV)


def test_plan_command_shows_two_nodes_with_two_eris_the_set_cpfs_budget_and_cost(training, tmp_path):
    # the stack on an image of its own (the shipped one installs the host layer on Alibaba's public image at first
    # boot: test_plan_cli.PUBLIC_IMAGE)
    doc = yaml.safe_load(stack_file(TRAINING).read_text())
    doc["config"]["goldenenv:nodes"]["hostImage"] = {"id": "m-goldenenv0test0image", "driver": "570.133.20"}
    (tmp_path / stack_file(TRAINING).name).write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["plan", "-s", TRAINING, "--stacks-dir", str(tmp_path)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert result.output.count(INSTANCE) == 3, "two GPU nodes and the Slurm head"
    assert result.output.count("eri=2 ") == 2 and "cards=0,1" in result.output
    assert "strategy=LowLatency" in result.output
    assert "alicloud:nas/dataFlow:DataFlow" in result.output and "BudgetGuard" in result.output
    price = catalog.price("alicloud", EBMGN8V, "cn-wulanchabu")
    assert f"{2 * price.usd_per_hour:,.2f}" in result.output
    assert "no guardrail failed" in result.output


@pytest.mark.parametrize("stack", EXAMPLES)
def test_example_stacks_plan_without_failed_guardrails(stack):
    result = plan(stack)
    assert not result.failed, [f.message for f in result.findings if f.severity.value == "error"]
    # the public host image has no driver, engine or toolkit: the host lock's install step provides them
    (checked,) = result.compat
    gpu_needs = ("engine", "driver", "toolkit")
    assert {p.need: p.by for p in checked.layer.provided if p.need in gpu_needs} == dict.fromkeys(gpu_needs, "install")
    assert len(gpu_nodes(result)) == sum(pool.count for pool in result.spec.nodes)


def test_each_ebmgn8v_node_has_two_eris_on_distinct_cards_with_explicit_queue_pairs(training):
    nodes = gpu_nodes(training)
    assert len(nodes) == 2
    for node in nodes:
        found = eris(node)
        assert len(found) == 2  # Alibaba PAI eRDMA doc (FACTS.md): ebmgn8v.48xlarge has 2 ERIs
        assert len(found) == catalog.instance_type("alicloud", EBMGN8V).rdma_interfaces
        assert sorted(int(i["networkCardIndex"]) for i in found) == [0, 1]
        assert all(int(i["queuePairNumber"]) >= 1 for i in found), "an ERI without queue pairs starves the other"
        secondary = node.props["networkInterfaces"]
        assert secondary["vswitchId"] == node.props["vswitchId"]
        assert secondary["securityGroupIds"] == node.props["securityGroups"]


def test_the_low_latency_deployment_set_holds_both_nodes(training):
    deployment_set = one(training, DEPLOYMENT_SET)
    assert deployment_set.props["strategy"] == "LowLatency"
    assert {n.props["deploymentSetId"] for n in gpu_nodes(training)} == {deployment_set.id}
    assert training.outputs["deploymentSets"] == [deployment_set.id]
    assert training.of_type("alicloud:ecs/hpcCluster:HpcCluster") == []


def test_cpfs_is_linked_to_the_stacks_oss_bucket_and_mounted_by_the_nodes(training):
    bucket = one(training, "alicloud:oss/bucket:Bucket")
    fs = one(training, "alicloud:nas/fileSystem:FileSystem")
    flow = one(training, "alicloud:nas/dataFlow:DataFlow")
    assert fs.props["fileSystemType"] == "cpfs"
    assert flow.props["fileSystemId"] == fs.id
    assert flow.props["sourceStorage"] == f"oss://{bucket.props['bucket']}"
    assert training.outputs["bucket"] == bucket.props["bucket"]
    assert training.outputs["sharedFs"] == fs.id
    _, files = user_data(gpu_nodes(training)[0])
    assert any(path.endswith("cpfs-mount.sh") for path in files)


def test_storage_is_retained_on_destroy(training):
    bucket = one(training, "alicloud:oss/bucket:Bucket")
    assert bucket.retain_on_delete is True and not bucket.props.get("forceDestroy")
    assert bucket in training.kept_on_destroy


def test_budget_guard_watches_the_stacks_limit_and_stops_the_nodes(training):
    function = one(training, "alicloud:fc/v3Function:V3Function")
    env = function.props["environmentVariables"]
    assert float(env[guard.LIMIT_ENV]) == training.spec.budget.monthly_limit
    assert env[guard.CURRENCY_ENV] == "CNY" == training.spec.budget.currency
    assert env[guard.HARD_STOP_ENV] == "true"
    assert training.outputs["budgetGuard"] == function.props["functionName"]


def test_cost_comes_from_the_catalog_in_its_currency(training):
    (cost,) = training.costs
    price = catalog.price("alicloud", EBMGN8V, "cn-wulanchabu")
    assert cost.usd_per_hour == pytest.approx(2 * price.usd_per_hour)
    assert cost.price.currency == "CNY"
    assert any("CNY" in f.message for f in training.findings if f.rule.startswith("cost:"))


@pytest.mark.parametrize("stack,changes", [(TRAINING, {}), (TRAINING, {"capacity": "spot"}), (DEV, {})],
                         ids=["training", "spot", "dev"])
def test_enum_strings_are_ones_the_provider_takes(stack, changes):
    result = plan_config("enums", with_nodes(stack, **changes))
    checked = 0
    for r in result.resources:
        for (type_token, prop), valid in VALID.items():
            if r.type == type_token and prop in r.props:
                assert r.props[prop] in valid, f"{r.name}.{prop} = {r.props[prop]!r}"
                checked += 1
        for prop, valid in SECONDARY_VALID.items():
            secondary = r.props.get("networkInterfaces") if r.type == INSTANCE else None
            if isinstance(secondary, dict) and prop in secondary:
                assert secondary[prop] in valid
    assert checked >= 10


def test_spot_bids_at_most_the_pay_as_you_go_price_and_is_released_when_reclaimed():
    result = plan_config("spot", with_nodes(capacity="spot"))
    for node in gpu_nodes(result):
        assert node.props["instanceChargeType"] == "PostPaid"
        assert (node.props["spotStrategy"], node.props["spotInterruptionBehavior"]) == ("SpotAsPriceGo", "Terminate")
    assert any("Terminate" in f.message for f in result.findings if f.rule == "plan-note")


def test_nodes_encrypt_their_disk_need_metadata_tokens_and_get_no_public_ip(training):
    for node in gpu_nodes(training):
        assert node.props["systemDiskEncrypted"] is True
        assert node.props["httpTokens"] == "required"
        assert not node.props.get("internetMaxBandwidthOut")
        assert node.props["resourceGroupId"] == one(training, "alicloud:resourcemanager/resourceGroup:ResourceGroup").id


@pytest.mark.parametrize("stack", EXAMPLES)
def test_every_taggable_resource_carries_the_stack_tags(stack):
    result = plan(stack)
    wanted = result.spec.stack_tags
    taggable = [r for r in result.resources if r.custom and is_taggable(r.type)]
    assert len(taggable) > 10
    for r in taggable:
        tags = r.props.get("tags") or {}
        assert {k: tags.get(k) for k in wanted} == wanted, f"{r.name} ({r.type}) lacks stack tags"
    assert not [f for f in result.findings if f.rule == "untagged-resource"]
    for node in gpu_nodes(result):
        assert node.props["volumeTags"][STACK_TAG_KEY] == stack


def test_node_role_reaches_only_the_stacks_bucket(training):
    bucket = one(training, "alicloud:oss/bucket:Bucket").props["bucket"]
    policy = next(r for r in training.of_type("alicloud:ram/policy:Policy") if r.name.endswith("-gpu-access"))
    statements = json.loads(policy.props["policyDocument"])["Statement"]
    oss = sorted(res for s in statements if any(a.startswith("oss:") for a in s["Action"]) for res in s["Resource"])
    assert oss == [f"acs:oss:*:*:{bucket}", f"acs:oss:*:*:{bucket}/*"]
    others = [a for s in statements for a in s["Action"] if not a.startswith("oss:")]
    assert all(a.startswith("nas:Describe") or a == "kms:GetSecretValue" for a in others), (
        "beyond the bucket, only the mount's read-only calls and reading the Slurm munge key")
    role = next(r for r in training.of_type("alicloud:ram/role:Role") if r.name.endswith("-gpu-role"))
    trust = json.loads(role.props["assumeRolePolicyDocument"])["Statement"]
    assert [s["Principal"]["Service"] for s in trust] == [["ecs.aliyuncs.com"]]
    attached = [a for a in training.of_type("alicloud:ecs/ramRoleAttachment:RamRoleAttachment")
                if "-gpu-" in a.name]
    assert sorted(a.props["instanceId"] for a in attached) == sorted(n.id for n in gpu_nodes(training))


def test_no_ssh_from_the_internet_and_members_reach_each_other(training):
    group = next(g for g in training.of_type(SECURITY_GROUP) if g.name.endswith("-nodes-sg"))
    assert group.props["innerAccessPolicy"] == "Accept"
    for rule in training.of_type(SECURITY_GROUP_RULE):
        source = rule.props.get("cidrIp") or rule.props.get("sourceSecurityGroupId")
        assert source not in ("0.0.0.0/0", None) or rule.props["type"] != "ingress"
    assert not [f for f in training.findings if f.rule in ("ssh-open-to-world", "ingress-open-to-world")]


def test_admin_cidr_opens_ssh_only_to_that_network():
    config = copy.deepcopy(example_config())
    config["goldenenv:network"]["adminCidrs"] = ["203.0.113.0/24"]
    result = plan_config("admin", config)
    (rule,) = [r for r in result.of_type(SECURITY_GROUP_RULE) if r.props.get("cidrIp")]
    assert (rule.props["type"], rule.props["ipProtocol"], rule.props["portRange"]) == ("ingress", "tcp", "22/22")
    assert rule.props["cidrIp"] == "203.0.113.0/24"
    nodes = next(g for g in result.of_type(SECURITY_GROUP) if g.name.endswith("-nodes-sg"))
    assert rule.props["securityGroupId"] == nodes.id


def test_nat_egress_has_an_enhanced_gateway_eip_and_snat_and_endpoints_has_none(training):
    nat = one(training, "alicloud:vpc/natGateway:NatGateway")
    snat = one(training, "alicloud:vpc/snatEntry:SnatEntry")
    nodes_switch = next(r for r in training.of_type("alicloud:vpc/switch:Switch") if r.name.endswith("-nodes"))
    assert nat.props["natType"] == "Enhanced"
    assert snat.props["sourceVswitchId"] == nodes_switch.id
    assert snat.props["snatIp"] == one(training, "alicloud:ecs/eipAddress:EipAddress").outputs["ipAddress"]
    config = copy.deepcopy(example_config())
    config["goldenenv:network"]["egress"] = "endpoints"
    private = plan_config("private", config)
    assert private.of_type("alicloud:vpc/natGateway:NatGateway") == []
    assert private.of_type("alicloud:ecs/eipAddress:EipAddress") == []


def test_erdma_nodes_check_the_driver_and_set_the_catalog_mtu_before_the_container():
    config = copy.deepcopy(example_config())
    config["goldenenv:image"]["ref"] = PUSHED
    result = plan_config("erdma", config)
    doc, files = user_data(gpu_nodes(result)[0])
    layout = catalog.node_layout("alicloud", EBMGN8V)
    mtu = catalog.fabric_mtu("erdma", layout.jumbo_frames)
    check = files["/usr/local/libexec/goldenenv/erdma-check.sh"]
    assert f"mtu={mtu.mtu}\n" in check and "expected=2\n" in check
    assert "lsmod" in check and "rdma dev show" in check
    container = files["/etc/systemd/system/goldenenv-container.service"]
    ordered = {line.split("=", 1)[0]: line.split("=", 1)[1].split() for line in container.splitlines()
               if line.startswith(("After=", "Wants=", "Requires="))}
    assert "goldenenv-erdma.service" in ordered["After"] and "goldenenv-erdma.service" in ordered["Wants"]
    assert "Requires" not in ordered, "the container waits for the check's ready marker, retried; never Requires="
    env = dict(line.split("=", 1) for line in files["/etc/goldenenv/launch.env"].splitlines()
               if line and not line.startswith("#"))
    for name, value in catalog.fabric_env("erdma").items():
        assert env[name] == value
    assert env.get("NCCL_PROTO", "") == mtu.nccl_proto
    enable = files[doc["runcmd"][0]]
    assert "goldenenv-erdma.service" in enable


def test_the_dev_node_has_no_eri_no_set_and_no_shared_file_system(dev):
    (node,) = gpu_nodes(dev)
    assert eris(node) == [] and "networkInterfaces" not in node.props
    assert dev.of_type(DEPLOYMENT_SET) == [] and dev.of_type("alicloud:nas/fileSystem:FileSystem") == []
    _, files = user_data(node)
    assert not any("erdma" in path for path in files)


@pytest.mark.parametrize("key", ["rdma", "efa"])
def test_rdma_and_its_old_name_efa_both_switch_the_eris(key):
    def written(value: bool) -> dict:
        config = with_nodes()
        del config["goldenenv:nodes"]["rdma"]
        config["goldenenv:nodes"][key] = value
        return config

    on, off = plan_config(f"on-{key}", written(True)), plan_config(f"off-{key}", written(False))
    assert all(len(eris(n)) == 2 for n in gpu_nodes(on))
    assert all(eris(n) == [] for n in gpu_nodes(off))
    _, files = user_data(gpu_nodes(off)[0])
    assert not any("erdma" in path for path in files)


def test_rdma_and_efa_together_are_one_clear_problem():
    with pytest.raises(Exception) as caught:
        stackconfig.load("both", *stackconfig.namespaced(with_nodes(efa=True)))
    (problem,) = caught.value.problems
    assert problem.key == "goldenenv:nodes" and "rdma and efa" in problem.message


def test_the_aws_stacks_still_read_efa():
    config = stackconfig.read_stack_file(stack_file("aws-p5-2node"))
    assert config["goldenenv:nodes"]["efa"] is True
    spec = stackconfig.load("aws-p5-2node", *stackconfig.namespaced(config))
    assert spec.nodes[0].rdma is True and spec.nodes[0].rdma_key == "efa"


# ---------------------------------------------------------------- bad configuration: one line naming the key

def bad_plan(tmp_path, config: dict):
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump({"config": config}))
    return runner.invoke(app, ["plan", "-s", "bad", "--stacks-dir", str(tmp_path)], env={"COLUMNS": "200"})


def problem_line(result, key: str) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if key in line]
    assert lines, result.output
    return lines[0]


@pytest.mark.parametrize("key", ["rdma", "efa"])
def test_erdma_asked_of_gn7i_names_the_key_written(tmp_path, key):
    config = example_config(DEV)
    config["goldenenv:nodes"][key] = True
    line = problem_line(bad_plan(tmp_path, config), f"goldenenv:nodes.{key}")
    assert "ecs.gn7i-c8g1.2xlarge has no RDMA" in line and EBMGN8V in line


def test_21_nodes_in_a_low_latency_set_name_the_count_the_limit_and_its_source(tmp_path):
    line = problem_line(bad_plan(tmp_path, with_nodes(count=21)), "goldenenv:nodes.count")
    assert "21" in line and "at most 20" in line and "help.aliyun.com" in line


def test_a_zone_outside_the_region_names_the_zone_key(tmp_path):
    config = example_config()
    config["goldenenv:zone"] = "cn-wulanchabu-z"
    line = problem_line(bad_plan(tmp_path, config), "goldenenv:zone")
    assert "cn-wulanchabu-z" in line and "cn-wulanchabu-c" in line


def test_a_budget_in_another_currency_than_the_prices_is_refused(tmp_path):
    config = example_config()
    config["goldenenv:budget"]["currency"] = "USD"
    line = problem_line(bad_plan(tmp_path, config), "goldenenv:budget.currency")
    assert "CNY" in line


def test_an_unknown_alibaba_type_suggests_the_api_name(tmp_path):
    line = problem_line(bad_plan(tmp_path, with_nodes(instanceType="ebmgn8v.48xlarge")),
                        "goldenenv:nodes.instanceType")
    assert EBMGN8V in line


def test_capacity_reservations_and_an_idle_stop_are_clear_errors_on_alicloud():
    config = with_nodes(capacity="capacity-reservation", capacityReservationId="cr-0123456789abcdef0")
    config["goldenenv:lifecycle"] = {"ttlHours": 8, "idleMinutes": 30}
    spec = stackconfig.load("x", *stackconfig.namespaced(config))
    with pytest.raises(Exception) as caught:
        clouds.validate(spec)
    problems = {p.key: p.message for p in caught.value.problems}
    assert {"goldenenv:nodes.capacity", "goldenenv:lifecycle.idleMinutes"} <= set(problems)
    assert "goldenenv:lifecycle.ttlHours" not in problems  # Alibaba's auto-release time gives the TTL
    assert "no idle stop" in problems["goldenenv:lifecycle.idleMinutes"]


def test_an_idle_stop_is_one_line_naming_the_key(tmp_path):
    config = example_config()
    config["goldenenv:lifecycle"] = {"idleMinutes": 30}
    line = problem_line(bad_plan(tmp_path, config), "goldenenv:lifecycle.idleMinutes")
    assert "no idle stop" in line


# ---------------------------------------------------------------- catalog and layout

def test_every_alibaba_type_has_a_layout_and_erdma_types_ask_queue_pairs():
    for name, it in catalog.instance_types("alicloud").items():
        assert name.startswith("ecs."), "Alibaba names are the API's"
        layout = catalog.node_layout("alicloud", name)
        assert layout is not None, name
        assert layout.placement in {"low-latency-set", "hpc-cluster", "none"}
        assert (layout.queue_pairs > 0) == it.has_rdma, name
    assert catalog.instance_type("alicloud", "ebmgn8v.48xlarge").name == EBMGN8V
    assert catalog.node_layout("alicloud", "ecs.sccgn7ex.32xlarge").placement == "hpc-cluster"


def test_the_catalog_anchors_match_alibabas_tables():
    """Literal figures from Alibaba's docs (FACTS.md), so a wrong row is caught."""
    assert catalog.instance_type("alicloud", "ecs.ebmgn7ex.32xlarge").rdma_interfaces == 2
    assert catalog.instance_type("alicloud", "ecs.gn7i-c8g1.2xlarge").rdma == "none"
    assert catalog.instance_type("alicloud", "ecs.gn7i-c8g1.2xlarge").gpu.memory_gib == 24
    assert {catalog.fabric_mtu("erdma", True).mtu, catalog.fabric_mtu("erdma", False).mtu} == {8500, 1400}


def test_an_scc_type_joins_an_hpc_cluster_and_gets_no_deployment_set():
    result = plan_config("scc", with_nodes(instanceType="ecs.sccgn7ex.32xlarge", rdma=None))
    cluster = one(result, "alicloud:ecs/hpcCluster:HpcCluster")
    assert {n.props["hpcClusterId"] for n in gpu_nodes(result)} == {cluster.id}
    assert result.of_type(DEPLOYMENT_SET) == []


def test_eri_layout_puts_the_second_eri_on_the_second_card_and_refuses_a_third():
    assert [(s.network_card_index, s.primary) for s in eri_layout(2, 2, 8)] == [(0, True), (1, False)]
    assert [s.network_card_index for s in eri_layout(1, 2, 8)] == [0, 0]
    with pytest.raises(ValueError):
        eri_layout(4, 3, 8)
    with pytest.raises(ValueError):
        eri_layout(2, 1, 0)


def test_validate_reaches_alibaba_nodes_over_ssh_as_the_host_images_user(monkeypatch):
    """`goldenenv validate -s <alicloud stack>` takes the same ssh:// path as AWS, with Alibaba's login."""
    from typer.testing import CliRunner

    from goldenenv import automation, lifecycle
    from goldenenv.cli import app

    seen = {}
    monkeypatch.setattr(automation, "outputs", lambda spec: {"nodePrivateIps": ["10.42.0.10", "10.42.0.11"]})

    def validate_hosts(lock, targets, *args, **kwargs):
        seen.update(lock=lock, targets=targets, cloud=args[3])
        raise automation.LifecycleError("stop here")

    monkeypatch.setattr(lifecycle, "validate_hosts", validate_hosts)
    result = CliRunner().invoke(app, ["validate", "-s", "alicloud-ebmgn8v-2node"])
    assert result.exit_code == 1 and "stop here" in result.output
    assert seen == {"lock": "alicloud-h100", "targets": ["ssh://root@10.42.0.10", "ssh://root@10.42.0.11"],
                    "cloud": "alicloud"}

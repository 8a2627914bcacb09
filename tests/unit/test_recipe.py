"""Every cloud's cluster is the one recipe (goldenenv/clouds/recipe.py) plus the cloud's parts: the order of a
cluster is written once, so a new cloud supplies parts and gets the order, the boot and the standard outputs.

The rules run over every cloud of the registry that builds with Pulumi; a fake cloud with fake parts, planned
through the recipe under the offline plan's mock monitor, shows what the recipe itself does.
"""

from __future__ import annotations

import base64
import gzip
from typing import Any

import pulumi
import pytest
import yaml

from goldenenv import clouds, plan, stackconfig
from goldenenv.clouds import recipe
from goldenenv.clouds.base import Capability
from tests.unit.shipped import plan_of, pulumi_stacks

PULUMI_CLOUDS = [name for name in clouds.names() if getattr(clouds.get(name), "uses_pulumi", False)]
SHIPPED_CLUSTERS = ("alicloud", "aws", "azure", "gcp")
"""The clouds issue 38 made recipes, each with all of the parts the issue lists."""


def cluster_of(name: str) -> type:
    if not clouds.installed(name):
        pytest.skip(f"{name}'s extra is not installed: {clouds.install_command(name)}")
    return clouds.load(name).GpuCluster


def test_the_registry_has_the_shipped_pulumi_clouds():
    assert set(SHIPPED_CLUSTERS) <= set(PULUMI_CLOUDS)


@pytest.mark.parametrize("name", PULUMI_CLOUDS)
def test_each_cloud_cluster_is_the_recipe_with_its_declared_parts(name):
    cluster = cluster_of(name)
    assert issubclass(cluster, recipe.Cluster), f"goldenenv.clouds.{name}.GpuCluster does not run the recipe"
    parts = cluster.parts
    assert issubclass(parts, recipe.Parts)
    assert parts.cloud is type(clouds.get(name)), "the parts name their own cloud (its head type, slurmd timeout)"
    assert recipe.REQUIRED <= recipe.provided(parts)
    for part in recipe.Part:
        method = getattr(parts, part.value)
        assert method is None or callable(method), f"{name}'s {part.value} is neither a method nor left out"


@pytest.mark.parametrize("name", PULUMI_CLOUDS)
def test_each_cloud_keeps_its_parts_in_parts_py(name):
    """The cluster parts are a module of their own beside the Cloud class (a reader finds them in one place), and
    the package still offers GpuCluster by its old name."""
    cluster = cluster_of(name)
    assert cluster.__module__ == f"goldenenv.clouds.{name}.parts", (
        f"{name}'s GpuCluster is defined in {cluster.__module__}, not goldenenv/clouds/{name}/parts.py")
    assert cluster.parts.__module__ == cluster.__module__


@pytest.mark.parametrize("name", PULUMI_CLOUDS)
def test_what_a_cloud_can_do_follows_from_its_parts(name):
    """A head needs a secret store for its munge key; a budget needs a guard that watches it."""
    parts = cluster_of(name).parts
    has = recipe.provided(parts)
    if clouds.get(name).head_instance_type:
        assert {recipe.Part.HEAD, recipe.Part.SECRET_STORE} <= has, f"{name} runs a head: it needs both parts"
    if Capability.BUDGET in clouds.get(name).capabilities:
        assert recipe.Part.BUDGET_GUARD in has, f"{name} offers budgets but has no budget guard part"


EVERY_PART = frozenset(recipe.Part)
SHIPPED_PARTS = {
    "alicloud": EVERY_PART,
    "aws": EVERY_PART - {recipe.Part.SCOPE},
    "azure": EVERY_PART,
    "gcp": EVERY_PART,
}
"""What each shipped cloud's cluster is made of: AWS needs no scope (no resource group or project to create)."""


@pytest.mark.parametrize("name", SHIPPED_CLUSTERS)
def test_the_shipped_clouds_supply_every_part_they_declare(name):
    assert recipe.provided(cluster_of(name).parts) == SHIPPED_PARTS[name]


# --- a fake cloud: what the recipe does with any cloud's parts -------------------------------------------------


class FakeCloud:
    name = "fake"
    head_instance_type = "fake.head"
    slurmd_timeout = 300


class Thing(pulumi.CustomResource):
    """A fake cloud's resource: the mock monitor records its inputs."""

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions):
        super().__init__("fake:index:Thing", name, props, opts)


class FakeParts(recipe.Parts):
    """Every part, each recording when it ran and declaring one resource."""

    cloud = FakeCloud
    calls: list[str]

    def _made(self, part: str, **props: Any) -> Thing:
        type(self).calls.append(part)
        return Thing(f"{self.name}-{part}", props, self.child)

    def retained_stores(self) -> None:
        type(self).calls.append("retained_stores")

    def scope(self) -> None:
        self._made("scope")

    def network(self) -> None:
        self._made("network")

    def data_store(self) -> recipe.DataStore:
        self._made("data_store")
        return recipe.DataStore(None, {"bucket": "fake-bucket"})

    def repository(self) -> recipe.Repository:
        self._made("repository")
        return recipe.Repository(pulumi.Output.from_input("registry.fake/images"))

    def secret_store(self) -> recipe.SecretStore:
        from goldenenv.nodeboot import MungeKey

        self._made("secret_store")
        return recipe.SecretStore(lambda reader: pulumi.Output.from_input(
            MungeKey("munge-key-aws.sh", {"secret_id": "fake-secret", "region": "fake-1"})))

    def head(self, shape: Any, boot: recipe.Boot) -> recipe.Head:
        self._made("head", userData=boot.head())
        return recipe.Head(pulumi.Output.from_input("10.0.0.2"), pulumi.Output.from_input("fake-head-id"))

    def node_pool(self, pool: Any, boot: recipe.Boot) -> recipe.NodePool:
        from goldenenv import catalog

        self._made(f"node_pool-{pool.name}", userData=boot.node(pool.name, "none", False))
        ips = [f"10.0.1.{i + 10}" for i in range(pool.count)]
        return recipe.NodePool(pool, catalog.instance_type("aws", pool.instance_type), pulumi.Output.from_input(ips),
                               pulumi.Output.from_input([f"node-{i}" for i in range(pool.count)]), None)

    def budget_guard(self, pools: list[recipe.NodePool]) -> recipe.BudgetGuard:
        self._made("budget_guard")
        return recipe.BudgetGuard({"budgetName": "fake-budget"})

    def outputs(self, built: recipe.Built) -> dict[str, Any]:
        return {"fakeZone": "fake-1a"}


class FakeCluster(recipe.Cluster):
    parts = FakeParts


class HeadlessParts(FakeParts):
    """A cloud with no image repository, no head and no budget guard: it leaves those parts out."""

    repository = None
    secret_store = None
    head = None
    budget_guard = None


class HeadlessCluster(recipe.Cluster):
    parts = HeadlessParts


IMAGE_REF = "registry.fake/images@sha256:" + "0" * 64


def fake_spec(**overrides: Any):
    config = stackconfig.read_stack_file(plan.stack_file("aws-g5-dev"))
    config["goldenenv:image"] = {"lock": "aws-ampere", "ref": IMAGE_REF}
    config.update({f"goldenenv:{k}": v for k, v in overrides.items()})
    return stackconfig.load("fake-demo", *stackconfig.namespaced(config))


def planned(cluster: type, spec) -> tuple[list, dict[str, Any], list[str]]:
    cluster.parts.calls = []
    records, outputs = plan.record(lambda: cluster("fake-demo", spec, clouds.BuildContext()).outputs, None,
                                   "fake-demo")
    return records, outputs, cluster.parts.calls


@pytest.fixture(scope="module")
def fake_plan():
    return planned(FakeCluster, fake_spec(nodes={"instanceType": "g5.xlarge", "count": 2}))


def test_a_fake_cloud_is_built_in_the_recipe_order(fake_plan):
    _, _, calls = fake_plan
    assert calls == ["retained_stores", "scope", "network", "data_store", "repository", "secret_store", "head",
                     "node_pool-gpu", "budget_guard"]


def test_a_fake_cloud_gets_the_standard_outputs_and_its_own(fake_plan):
    _, outputs, _ = fake_plan
    assert outputs["nodePrivateIps"] == ["10.0.1.10", "10.0.1.11"]
    assert outputs["instanceIds"] == ["node-0", "node-1"]
    assert outputs["hostfile"] == "10.0.1.10 slots=1\n10.0.1.11 slots=1\n"
    assert "launchEnv" in outputs
    assert outputs["headPrivateIp"] == "10.0.0.2" and outputs["headInstanceId"] == "fake-head-id"
    assert outputs["imageRepository"] == "registry.fake/images"
    assert outputs["bucket"] == "fake-bucket" and outputs["budgetName"] == "fake-budget"
    assert outputs["fakeZone"] == "fake-1a"


def boot_text(user_data: str) -> str:
    """A cloud-config's files as the host writes them (gz+b64 ones unpacked), one after another."""
    files = yaml.safe_load(user_data)["write_files"]
    return "\n".join(gzip.decompress(base64.b64decode(f["content"])).decode()
                     if f.get("encoding") == "gz+b64" else f["content"] for f in files)


def test_a_fake_cloud_nodes_boot_into_the_head_queue_with_the_stores_munge_key(fake_plan):
    records, _, _ = fake_plan
    boot = {r.name: boot_text(r.props["userData"]) for r in records
            if r.type == "fake:index:Thing" and "userData" in r.props}
    assert "10.0.0.2" in boot["fake-demo-node_pool-gpu"], "a node's slurmd registers with the head's address"
    assert "fake-secret" in boot["fake-demo-node_pool-gpu"] and "fake-secret" in boot["fake-demo-head"]
    assert "slurmctld" in boot["fake-demo-head"] and "slurmctld" not in boot["fake-demo-node_pool-gpu"]


def test_every_fake_resource_is_a_child_of_the_cluster_component(fake_plan):
    records, _, _ = fake_plan
    component = next(r for r in records if r.type == "goldenenv:fake:GpuCluster")
    assert {r.parent_urn for r in records if r.type == "fake:index:Thing"} == {component.urn}


def test_a_cloud_that_leaves_parts_out_builds_without_them():
    _, outputs, calls = planned(HeadlessCluster, fake_spec())
    assert calls == ["retained_stores", "scope", "network", "data_store", "node_pool-gpu"]
    assert "headPrivateIp" not in outputs and "imageRepository" not in outputs and "budgetName" not in outputs
    assert outputs["nodePrivateIps"] == ["10.0.1.10"]
    assert recipe.provided(HeadlessParts) == recipe.REQUIRED | {recipe.Part.SCOPE}


def test_no_head_is_built_when_the_stack_runs_no_scheduler():
    _, outputs, calls = planned(FakeCluster, fake_spec(scheduler="none"))
    assert "head" not in calls and "secret_store" not in calls
    assert "headPrivateIp" not in outputs


class BudgetOnlyParts(FakeParts):
    """A cloud whose budget guard watches the budget alone (a stop function), named by its budget_output."""

    budget_output = "budgetFunction"

    def budget_guard(self, pools: list[recipe.NodePool]) -> recipe.BudgetGuard:
        self._made("budget_guard")
        return recipe.BudgetGuard({self.budget_output: "fake-stop-function"})


class BudgetOnlyCluster(recipe.Cluster):
    parts = BudgetOnlyParts


def test_a_guard_of_the_budget_alone_is_built_only_for_a_stack_with_a_budget():
    """The recipe owns the no-budget case once: no guard is asked for, and its output is None (which the stack's
    outputs leave out)."""
    _, outputs, calls = planned(BudgetOnlyCluster, fake_spec(budget=None))
    assert "budget_guard" not in calls and outputs.get("budgetFunction") is None
    _, outputs, calls = planned(BudgetOnlyCluster, fake_spec())
    assert calls[-1] == "budget_guard" and outputs["budgetFunction"] == "fake-stop-function"
    _, outputs, calls = planned(FakeCluster, fake_spec(budget=None))
    assert calls[-1] == "budget_guard", "a guard that watches more than the budget (budget_output None) always runs"


@pytest.mark.parametrize("cloud, stack", [(c, s) for c, s in pulumi_stacks() if c in PULUMI_CLOUDS])
def test_a_shipped_stack_names_its_budget_guard_in_the_clouds_budget_output(cloud, stack):
    output = cluster_of(cloud).parts.budget_output
    if output is None:
        pytest.skip(f"{cloud}'s budget guard watches more than the budget: it names its own outputs")
    planned_stack = plan_of(stack)
    assert bool(planned_stack.outputs.get(output)) == bool(planned_stack.spec.budget), (
        f"{stack}: {output} names the guard exactly when the stack has a budget")

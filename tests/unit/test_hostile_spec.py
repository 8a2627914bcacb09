"""A stack file must never be able to run a command, open SSH to the internet or drop its budget unnoticed.

Each shell payload is fed, inside an otherwise valid value, to every spec field that reaches a shell script,
cloud-init, an env file, a Dockerfile or an IAM policy; the configuration is refused at load time, naming the key.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv.clouds.aws import lustre_mount
from goldenenv import stackconfig
from goldenenv.cli import app
from goldenenv.guardrails import Severity
from goldenenv.plan import NO_BUDGET, STACKS, budget_findings, pool_costs
from goldenenv.spec import ClusterSpec, ConfigError, Network

STACK = STACKS / "Pulumi.aws-p5-2node.yaml"
DIGEST = "sha256:" + "0" * 64
runner = CliRunner()

PAYLOADS = {
    "semicolon": "x; touch pwned",
    "subshell": "$(touch pwned)",
    "backticks": "`touch pwned`",
    "quotes": "x' \"y",
    "newline": "\n",
    "ld-preload": "\n LD_PRELOAD=/tmp/x.so",
}


def _set(path: str, make: Callable[[str], Any]) -> Callable[[dict, str], None]:
    """Write make(payload) at a dotted path of the stack's values (nodes is the single pool's mapping)."""

    def apply(values: dict, payload: str) -> None:
        *parents, last = path.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = make(payload)

    return apply


# field -> (how the payload goes in, the key the problem must name). Each payload rides on a valid value, so the
# refusal is about the payload, not about an otherwise wrong value.
FIELDS: dict[str, tuple[Callable[[dict, str], None], str]] = {
    "cloud": (_set("cloud", lambda p: "aws" + p), "goldenenv:cloud"),
    "region": (_set("region", lambda p: "us-east-1" + p), "goldenenv:region"),
    "zone": (_set("zone", lambda p: "us-east-1a" + p), "goldenenv:zone"),
    "nodes.name": (_set("nodes.name", lambda p: "gpu" + p), "goldenenv:nodes.name"),
    "nodes.instanceType": (_set("nodes.instanceType", lambda p: "p5.48xlarge" + p), "goldenenv:nodes.instanceType"),
    "storage.bucket.bucketName": (_set("storage.bucket.bucketName", lambda p: "acme-ckpt" + p),
                                  "goldenenv:storage.bucket.bucketName"),
    "storage.parallelFs.datasetPrefix": (_set("storage.parallelFs.datasetPrefix", lambda p: "datasets" + p),
                                         "goldenenv:storage.parallelFs.datasetPrefix"),
    "storage.parallelFs.checkpointPrefix": (_set("storage.parallelFs.checkpointPrefix", lambda p: "ckpt/" + p),
                                            "goldenenv:storage.parallelFs.checkpointPrefix"),
    "storage.parallelFs.mountPoint": (_set("storage.parallelFs.mountPoint", lambda p: "/fsx" + p),
                                      "goldenenv:storage.parallelFs.mountPoint"),
    "storage.localNvme.mountPoint": (_set("storage.localNvme.mountPoint", lambda p: "/scratch" + p),
                                     "goldenenv:storage.localNvme.mountPoint"),
    "tags.project": (_set("tags.project", lambda p: "llm" + p), "goldenenv:tags.project"),
    "tags.owner": (_set("tags.owner", lambda p: "ml" + p), "goldenenv:tags.owner"),
    "tags.costCenter": (_set("tags.costCenter", lambda p: "r-1" + p), "goldenenv:tags.costCenter"),
    "tags.extra key": (_set("tags.extra", lambda p: {"team" + p: "vision"}), "goldenenv:tags.extra"),
    "tags.extra value": (_set("tags.extra", lambda p: {"team": "vision" + p}), "goldenenv:tags.extra"),
    "image.lock": (_set("image.lock", lambda p: "aws-h100" + p), "goldenenv:image.lock"),
    "image.ref": (_set("image.ref", lambda p: f"registry.example.com/golden@{DIGEST}" + p), "goldenenv:image.ref"),
    "budget.emails": (_set("budget.emails", lambda p: [f"ml{p}@example.com"]), "goldenenv:budget.emails"),
    "network.cidr": (_set("network.cidr", lambda p: "10.42.0.0/16" + p), "goldenenv:network.cidr"),
    "network.adminCidrs": (_set("network.adminCidrs", lambda p: ["203.0.113.0/24" + p]),
                           "goldenenv:network.adminCidrs"),
}


def stack_values() -> dict[str, Any]:
    values, unknown = stackconfig.namespaced(stackconfig.read_stack_file(STACK))
    assert not unknown
    return copy.deepcopy(values)


def refusal(values: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        stackconfig.load("s", values)
    return caught.value


def test_the_base_stack_loads():
    """Without a payload every field's valid value loads, so each refusal below is the payload's."""
    values = stack_values()
    for apply, _ in FIELDS.values():
        apply(values, "")
    spec = stackconfig.load("s", values)
    assert spec.storage.parallel_fs.mount_point == "/fsx" and spec.network.admin_cidrs


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("field", FIELDS)
def test_a_shell_payload_is_refused_at_config_time_naming_the_key(field, payload):
    apply, key = FIELDS[field]
    values = stack_values()
    apply(values, payload)
    problems = refusal(values).problems
    assert any(p.key.startswith(key) for p in problems), [str(p) for p in problems]
    assert all("\n" not in str(p) for p in problems)  # an echoed payload cannot split the report


def test_legal_tag_text_is_accepted_and_inert():
    """Tag values may hold spaces and `=` (AWS allows them): " LD_PRELOAD=/tmp/x.so" is legal text. It is inert
    because tags travel to AWS APIs as data (resource tags, default_tags) and no template renders them: the node's
    cloud-init does not contain it."""
    from goldenenv.nodeboot import NodeBoot

    values = stack_values()
    values["tags"]["extra"] = {"note": "a=b LD_PRELOAD=/tmp/x.so"}
    spec = stackconfig.load("s", values)
    assert spec.stack_tags["note"] == "a=b LD_PRELOAD=/tmp/x.so"
    boot = NodeBoot(spec, "gpu", fabric="efa", local_nvme=True, image_ref=f"registry.example.com/golden@{DIGEST}")
    assert "LD_PRELOAD" not in boot.cloud_config(lustre_mount("fs-1.fsx.example.com", "abc"))


@pytest.mark.parametrize("value", ["us-east-1\n", "us-east-1\r\n", "us-east-1 ", "US-EAST-1"])
def test_region_must_match_whole(value):
    """pydantic-core's Rust `$` is the end of the text: a trailing newline fails `^...$` (Python's would not)."""
    values = stack_values()
    values["region"] = value
    assert [p.key for p in refusal(values).problems] == ["goldenenv:region"]


def test_aws_region_check_uses_fullmatch():
    from goldenenv.clouds.aws import AwsCloud

    spec = stackconfig.load("s", stack_values())
    hostile = spec.model_copy(update={"region": "us-east-1\n"})  # past the spec's own pattern
    assert [p.key for p in AwsCloud().check(hostile) if "region name" in p.message] == ["goldenenv:region"]


# ---------------------------------------------------------------- admin CIDRs: the union counts

@pytest.mark.parametrize("cidrs", [
    ["0.0.0.0/1", "128.0.0.0/1"],
    ["0.0.0.0/0"],
    ["::/0"],
    ["2.0.0.0/8", "3.0.0.0/8"],     # two /8s that collapse into the public 2.0.0.0/7
    ["64.0.0.0/3"],
    ["2000::/3"],
    ["2600::/16"],
], ids=["halves", "world", "world6", "two-8s", "slash3", "ipv6-global", "ipv6-16"])
def test_admin_cidrs_covering_public_space_are_refused(cidrs):
    values = stack_values()
    values["network"] = {"adminCidrs": cidrs}
    [problem] = refusal(values).problems
    assert problem.key == "goldenenv:network.adminCidrs"
    assert "together cover" in problem.message


def test_the_halves_are_named_as_the_whole_internet():
    values = stack_values()
    values["network"] = {"adminCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}
    [problem] = refusal(values).problems
    assert "0.0.0.0/0" in problem.message and "whole internet" in problem.message


@pytest.mark.parametrize("cidrs", [
    ["203.0.113.0/24"],
    ["198.51.100.7/32", "203.0.113.0/24", "2001:db8:1234::/48"],
    ["11.0.0.0/8"],                  # one /8: the widest public block allowed
    ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"],  # private space is not the internet
    ["2a00:1450::/32"],
], ids=["office", "mixed", "one-8", "private", "ipv6-32"])
def test_narrow_or_private_admin_cidrs_pass(cidrs):
    spec = Network.model_validate({"adminCidrs": cidrs})
    assert len(spec.admin_cidrs) == len(cidrs)


def test_admin_cidr_that_is_no_network_names_the_key_once():
    values = stack_values()
    values["network"] = {"adminCidrs": ["10.0.0.1/24"]}
    [problem] = refusal(values).problems
    assert problem.key == "goldenenv:network.adminCidrs" and "host bits" in problem.message


# ---------------------------------------------------------------- tags

def test_more_extra_tags_than_aws_leaves_room_for_are_refused():
    values = stack_values()
    values["tags"]["extra"] = {f"k{i}": "v" for i in range(60)}
    [problem] = refusal(values).problems
    assert problem.key == "goldenenv:tags.extra" and "60" in problem.message and "50" in problem.message


def test_forty_extra_tags_fit():
    values = stack_values()
    values["tags"]["extra"] = {f"k{i}": "v" for i in range(40)}
    assert len(stackconfig.load("s", values).stack_tags) == 44  # project, owner, cost-center, stack + 40


@pytest.mark.parametrize("tags,key", [
    ({"project": "   "}, "goldenenv:tags.project"),
    ({"owner": ""}, "goldenenv:tags.owner"),
    ({"extra": {"team": "  "}}, "goldenenv:tags.extra"),
    ({"extra": {"goldenenv:ttl-hours": "1"}}, "goldenenv:tags.extra"),
    ({"extra": {"project": "other"}}, "goldenenv:tags.extra"),
    ({"extra": {"k" * 129: "v"}}, "goldenenv:tags.extra"),
    ({"costCenter": "x" * 257}, "goldenenv:tags.costCenter"),
], ids=["blank-project", "empty-owner", "blank-extra", "reserved-prefix", "shadows-project", "long-key",
        "long-value"])
def test_blank_reserved_or_oversized_tags_are_refused(tags, key):
    values = stack_values()
    values["tags"].update(tags)
    problems = refusal(values).problems
    assert any(p.key.startswith(key) for p in problems), [str(p) for p in problems]


# ---------------------------------------------------------------- budget

def _spec(**update: Any) -> ClusterSpec:
    return stackconfig.load("s", stack_values()).model_copy(update=update)


def _budget_findings(spec: ClusterSpec):
    return budget_findings(spec, pool_costs(spec))


def test_a_cloud_stack_without_a_budget_is_an_error():
    [finding] = _budget_findings(_spec(budget=None))
    assert finding.severity is Severity.ERROR and finding.rule == NO_BUDGET
    assert "goldenenv:budget" in finding.message and "budget: none" in finding.message


def test_budget_none_is_a_warning_that_nothing_stops_spending():
    [finding] = _budget_findings(_spec(budget=None, budget_opt_out=True))
    assert finding.severity is Severity.WARNING and finding.rule == NO_BUDGET
    assert "no alert and no stop" in finding.message


def test_a_stack_with_a_budget_or_on_the_local_cloud_has_no_budget_finding():
    assert _budget_findings(_spec()) == []
    local, unknown = stackconfig.namespaced(stackconfig.read_stack_file(STACKS / "Pulumi.local.yaml"))
    assert _budget_findings(stackconfig.load("local", local)) == []


def test_a_budget_and_an_opt_out_together_are_refused():
    problems = refusal({**stack_values(), "budgetOptOut": True}).problems
    assert [p.key for p in problems] == ["goldenenv:budgetOptOut"]
    assert "budget: none" in problems[0].message


# ---------------------------------------------------------------- through `goldenenv plan`

def _stack_dir(tmp_path: Path, edit: Callable[[dict], None]) -> Path:
    doc = yaml.safe_load(STACK.read_text())
    edit(doc["config"])
    (tmp_path / "Pulumi.hostile.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


def _plan(stacks: Path) -> Any:
    return runner.invoke(app, ["plan", "-s", "hostile", "--stacks-dir", str(stacks)], env={"COLUMNS": "300"})


def test_plan_refuses_admin_cidr_halves_naming_the_key(tmp_path):
    stacks = _stack_dir(tmp_path, lambda c: c["goldenenv:network"].update(adminCidrs=["0.0.0.0/1", "128.0.0.0/1"]))
    result = _plan(stacks)
    assert result.exit_code == 2, result.output
    assert "goldenenv:network.adminCidrs" in result.output and "0.0.0.0/0" in result.output


def test_plan_fails_a_cloud_stack_without_a_budget(tmp_path):
    result = _plan(_stack_dir(tmp_path, lambda c: c.pop("goldenenv:budget")))
    assert result.exit_code == 1, result.output
    assert NO_BUDGET in result.output and "guardrails failed" in result.output


def _stackconfig_reads_budget_none() -> bool:
    values = stack_values()
    values["budget"] = "none"
    try:
        return stackconfig.load("s", values).budget_opt_out
    except ConfigError:
        return False


@pytest.mark.skipif(not _stackconfig_reads_budget_none(), reason="stackconfig's `budget: none` is not in yet")
def test_plan_passes_budget_none_with_a_warning(tmp_path):
    result = _plan(_stack_dir(tmp_path, lambda c: c.update({"goldenenv:budget": "none"})))
    assert result.exit_code == 0, result.output
    assert re.search(rf"warning {NO_BUDGET}", result.output), result.output

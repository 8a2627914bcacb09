"""A stack file must never be able to run a command, open SSH to the internet or drop its budget unnoticed.

Each shell payload is fed, inside an otherwise valid value, to every spec field that reaches a shell script,
cloud-init, an env file, a Dockerfile or an IAM policy; the configuration is refused at load time, naming the key.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from goldenenv.clouds.aws.basics import lustre_mount
from goldenenv import stackconfig
from goldenenv.cli import app
from goldenenv.guardrails import Severity
from goldenenv.plan import NO_BUDGET, STACKS, budget_findings, pool_costs
from goldenenv import spec as spec_module
from goldenenv.images import lock as lock_module
from goldenenv.spec import ClusterSpec, ConfigError, Network, NodePool

STACK = STACKS / "Pulumi.aws-p5-2node.yaml"
DIGEST = "sha256:" + "0" * 64
runner = CliRunner()
MODEL_NAME = re.compile(r"\b(%s)\b" % "|".join(sorted(
    v.__name__ for m in (spec_module, lock_module) for v in vars(m).values()
    if isinstance(v, type) and issubclass(v, BaseModel))))
"""Any pydantic model class of the stack's spec or a lock, as a word: no message may name one (issue 21)."""

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
    ({"extra": {"k" * 513: "v"}}, "goldenenv:tags.extra"),
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


# ---------------------------------------------------------------- a section of the wrong kind

def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models a field holds, through Optional, unions and Annotated (not inside lists or mappings)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def _sections(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], type[BaseModel]]]:
    """Every mapping a stack file writes, by its keys as written (storage.parallelFs), with the model it holds."""
    found = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        annotation = field.annotation
        if typing.get_origin(annotation) is list:  # goldenenv:nodes: one pool's mapping in a single-pool stack
            annotation = typing.get_args(annotation)[0]
        for inner in _models(annotation):
            found += [((*path, key), inner), *_sections(inner, (*path, key))]
    return found


SECTIONS = _sections(ClusterSpec)


def _written_keys(model: type[BaseModel]) -> str:
    return ", ".join(f.alias or n for n, f in model.model_fields.items())


def test_every_nested_model_is_a_section_here():
    """The walk above reaches every model a stack file can write, so the test below covers each one."""
    reached = {model for _, model in SECTIONS}
    written = {v for v in vars(spec_module).values() if isinstance(v, type) and issubclass(v, spec_module.Model)}
    written -= {spec_module.Model, ClusterSpec}
    assert written <= reached, written - reached


WRONG_KINDS = {"false": (False, "false"), "true": (True, "true"), "text": ("x", "'x'"), "number": (3, "3"),
               "list": ([1], "a list")}
"""Values no section is, and how a message shows each (YAML's spelling)."""


def _wrong_kind_cases():
    for path, model in SECTIONS:
        for name, (value, written) in WRONG_KINDS.items():
            if name == "text" and model is spec_module.HostImageOverride:
                continue  # hostImage may be text: a catalog name
            if name == "list" and path == ("team",):
                continue  # a list is what the team is: its item 1 is refused at team[0] (test_team_cli)
            if name == "list" and path == ("nodes",):
                written = "1"  # a list of pools: its item is the pool of the wrong kind
            yield pytest.param(path, model, value, written, id=f"{'.'.join(path)}-{name}")


@pytest.mark.parametrize("path, model, value, written", list(_wrong_kind_cases()))
def test_a_section_of_the_wrong_kind_says_what_it_holds(path, model, value, written):
    """`goldenenv:storage: false` is refused with the keys storage holds, as a stack file writes them, and the value
    in YAML's spelling: never pydantic's `instance of Storage`."""
    values = stack_values()
    _set(".".join(path), lambda _: value)(values, "")
    problems = refusal(values).problems
    key = "goldenenv:" + ".".join(path)
    [problem] = [p for p in problems if p.key == key]
    assert f"a mapping with {_written_keys(model)}" in problem.message, str(problem)
    assert problem.message.startswith("must be ") and f"; got {written}" in problem.message, str(problem)
    for p in problems:
        assert not MODEL_NAME.search(str(p)), str(p)


def test_a_pool_of_the_wrong_kind_is_named_by_its_index():
    values = stack_values()
    values["nodes"] = [values["nodes"], {**values["nodes"], "name": "b", "hostImage": False}, False]
    problems = [str(p) for p in refusal(values).problems]
    pool = _written_keys(NodePool)
    assert problems == [
        "goldenenv:nodes[1].hostImage: must be text or a mapping with id, driver, kernelModules, os; got false",
        f"goldenenv:nodes[2]: must be a mapping with {pool}; got false",
    ]


def test_a_value_one_kind_fits_is_judged_as_that_kind():
    """hostImage is a catalog name or {id, driver}: a mapping is judged as one, text as a name, in one line each."""
    values = stack_values()
    values["nodes"]["hostImage"] = {"id": 5, "driver": "570.133.20"}
    assert [str(p) for p in refusal(values).problems] == ["goldenenv:nodes.hostImage.id: must be text; got 5"]
    values["nodes"]["hostImage"] = "Not-A-Name"
    [problem] = refusal(values).problems
    assert problem.key == "goldenenv:nodes.hostImage" and "; write " in problem.message and "mapping" not in str(problem)


def _project(tmp_path: Path, stack: str, edit: Callable[[dict], None]) -> Path:
    """A copy of a project: Pulumi.yaml and one stack file (locks and templates come from the package)."""
    root = tmp_path / "infra"
    (root / "stacks").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "infra", "runtime": "python",
                                                      "stackConfigDir": "stacks"}))
    doc = yaml.safe_load(STACK.read_text())
    edit(doc["config"])
    (root / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    return root


def test_plan_says_what_storage_holds_when_it_is_false(tmp_path, monkeypatch):
    from goldenenv import project

    monkeypatch.chdir(Path.cwd())  # --cwd moves into the project; the next test starts where this one did
    monkeypatch.setattr(project, "_current", None)
    root = _project(tmp_path, "bad", lambda c: c.update({"goldenenv:storage": False}))
    assert "goldenenv:storage: false" in (root / "stacks" / "Pulumi.bad.yaml").read_text()
    result = runner.invoke(app, ["--cwd", str(root), "plan", "-s", "bad"], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "goldenenv:storage: must be a mapping with bucket, parallelFs, localNvme; got false" in result.output
    assert not MODEL_NAME.search(result.output) and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("network, message", [
    ({"cidr": False}, "goldenenv:network.cidr: write a private network as text, e.g. 10.42.0.0/16; got false"),
    ({"cidr": 5}, "goldenenv:network.cidr: write a private network as text, e.g. 10.42.0.0/16; got 5"),
    ({"adminCidrs": [5]}, "goldenenv:network.adminCidrs: 5: write a network as text, such as 203.0.113.0/24"),
])
def test_a_network_written_as_a_number_is_refused_not_read_as_an_address(network, message):
    """ipaddress reads 5 as 0.0.0.5 and false as 0.0.0.0: a stack file's network is text."""
    doc = yaml.safe_load((STACKS / "Pulumi.aws-p5-2node.yaml").read_text())["config"]
    doc["goldenenv:network"] = network
    with pytest.raises(ConfigError) as e:
        stackconfig.load("aws-p5-2node", *stackconfig.namespaced(doc))
    assert message in [str(p) for p in e.value.problems]


# ---------------------------------------------------------------- bounds a stack cannot repeat its way past (issue 22)

def test_pools_cannot_add_up_past_the_node_limit_of_one_pool():
    """Two pools of 2,048 did not plan in 180 s: the pools' sum is held to one pool's limit, naming goldenenv:nodes."""
    values = stack_values()
    pool = values["nodes"]
    values["nodes"] = [{**pool, "name": "a", "count": 2048}, {**pool, "name": "b", "count": 2048}]
    problems = [str(p) for p in refusal(values).problems]
    assert problems == ["goldenenv:nodes: 4,096 nodes over the pools (a: 2,048, b: 2,048); a stack holds at most "
                        "2,048, as one pool may: make the pools smaller or split them into stacks"]
    values["nodes"] = [{**pool, "name": "a", "count": 1024}, {**pool, "name": "b", "count": 1024}]
    assert sum(p.count for p in stackconfig.load("s", values).nodes) == spec_module.MAX_NODES


@pytest.mark.parametrize("limit", [1e300, 1e10, 1_000_000_001])
def test_a_monthly_limit_no_cloud_budget_takes_is_refused(limit):
    values = stack_values()
    values["budget"]["monthlyLimit"] = limit
    [problem] = refusal(values).problems
    assert problem.key == "goldenenv:budget.monthlyLimit" and "1,000,000,000" in problem.message
    values["budget"]["monthlyLimit"] = 1_000_000_000
    assert stackconfig.load("s", values).budget.monthly_limit == 1e9


def test_plan_strict_refuses_a_monthly_limit_of_1e300(tmp_path):
    """The probe's case: `monthlyLimit: 1e300` passed --strict (YAML 1.1 reads it as text, pydantic as 1e300)."""
    for written in ("1e300", "1.0e+300"):
        (tmp_path / "Pulumi.hostile.yaml").write_text(
            STACK.read_text().replace("monthlyLimit: 40000", f"monthlyLimit: {written}"))
        result = runner.invoke(app, ["plan", "-s", "hostile", "--stacks-dir", str(tmp_path), "--strict"],
                               env={"COLUMNS": "300"})
        assert result.exit_code == 2, result.output
        assert "goldenenv:budget.monthlyLimit" in result.output and "Traceback" not in result.output


UNPATTERNED = {
    ("NodePool", "ssh_public_key"): "parsed by goldenenv.sshkeys (one OpenSSH public key line, never echoed); it "
                                    "reaches only the cloud key pair's publicKey field",
    ("Member", "ssh_public_key"): "parsed by goldenenv.sshkeys (one OpenSSH public key line, never echoed); it "
                                  "reaches only the team file, as its last column, which the head reads as data",
    ("Run", "estimate"): "a mapping of goldenenv estimate's keys, each typed by estimate.spec_problems; no "
                         "resource reads it",
}
"""The string-bearing fields of the stack and lock models without a pattern, and why each is inert."""


def _text_without_pattern(annotation: Any, constrained: bool = False) -> bool:
    """Whether a type admits text with no pattern on it (through Optional, unions, lists, dicts, Annotated)."""
    origin = typing.get_origin(annotation)
    if annotation in (str, Any, dict, list):  # a bare dict or list holds any text
        return not constrained
    if origin is typing.Annotated:
        inner, *meta = typing.get_args(annotation)
        has = constrained or any(getattr(m, "pattern", None) for m in meta) or any(
            getattr(x, "pattern", None) for m in meta for x in getattr(m, "metadata", ()))
        return _text_without_pattern(inner, has)
    if origin in (typing.Union, types.UnionType, list, tuple, dict, typing.Literal):
        return origin is not typing.Literal and any(_text_without_pattern(a, constrained)
                                                    for a in typing.get_args(annotation))
    return False


def _all_models(root: type[BaseModel], seen: set) -> Iterator[type[BaseModel]]:
    """Every model reachable from `root`, through lists and mappings too."""
    if root in seen:
        return
    seen.add(root)
    yield root
    for f in root.model_fields.values():
        for t in _nested_types(f.annotation):
            if isinstance(t, type) and issubclass(t, BaseModel):
                yield from _all_models(t, seen)


def _nested_types(annotation: Any) -> Iterator[Any]:
    yield annotation
    for a in typing.get_args(annotation):
        yield from _nested_types(a)


def test_every_accepted_string_has_a_pattern_or_is_shown_inert():
    found = {}
    for root in (ClusterSpec, lock_module.Lock):
        for model in _all_models(root, set()):
            for name, f in model.model_fields.items():
                has = any(getattr(m, "pattern", None) for m in f.metadata)
                if _text_without_pattern(f.annotation, has):
                    found[(model.__name__, name)] = f.annotation
    assert set(found) == set(UNPATTERNED), {k: str(v) for k, v in found.items() if k not in UNPATTERNED}

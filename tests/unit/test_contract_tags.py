"""Each cloud's tag (or label) rule, checked where that cloud applies it, key and value apart.

(A length the cloud shares with goldenenv's own limit on every cloud, spec.TagKey and spec.TagText, is refused by
the stack file's check first, in its words: the key and the length are named either way.)

The stack's tags go on every resource of a cloud stack, so a tag the cloud refuses fails `up` halfway. Each cloud's
folder says its rule as data (clouds/<cloud>/tags.py: RULE, or None with NO_RULE saying why nothing is judged), and
clouds.tagrules checks a stack's tags with it in the cloud's check, naming the key the user wrote. The rule was
AWS's everywhere: an Azure value with `%` (which Azure takes) was refused, and so was a 200-character Azure tag name.
Held here over every registered cloud with literal anchors from each cloud's page, and over every shipped stack.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import clouds, stackconfig
from goldenenv.cli import app
from goldenenv.clouds import tagrules
from goldenenv.clouds.gcp import labels
from goldenenv.spec import ConfigError
from shipped import STACKS, pulumi_stacks

ANCHORS: dict[str, dict[str, Any]] = {
    "aws": dict(key_max=128, value_max=256, key_prefixes=("aws:",), value_prefixes=("aws:",), refused="%&<>",
                taken="Team Ü+-=._:/@1"),
    "azure": dict(key_max=512, value_max=256, key_prefixes=("azure", "windows", "microsoft"), value_prefixes=(),
                  refused="<>%&\\?/", taken="Team Ü-_.:=+@1"),
    "alicloud": dict(key_max=128, value_max=128, key_prefixes=("aliyun", "acs:"), value_prefixes=("acs:",),
                     refused="", taken="Team Ü%&-_.:/=+@1", key_bytes=64, value_bytes=128),
    "gcp": dict(key_max=63, value_max=63, key_prefixes=(), value_prefixes=(), refused="", taken="équipe_チ-1"),
    "tencent": dict(key_max=127, value_max=255, key_prefixes=("qcs:", "project", "项目"), value_prefixes=(), refused="%&#",
                    taken="Team Ü+-=._:/@1"),
    "huawei": dict(key_max=36, value_max=43, key_prefixes=(), value_prefixes=(), refused=":/=+@ .", taken="Team_团队-1"),
}
"""Literal anchors from each cloud's page: AWS https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html
(keys 128, values 256, letters, numbers, spaces and + - = . _ : / @, aws: reserved in keys and values); Azure
https://learn.microsoft.com/azure/azure-resource-manager/management/tag-resources#limitations (names 512, values 256,
no < > % & \\ ? / in a name; microsoft, azure, windows reserved); Alibaba Cloud's Tag structure (keys and values 128,
no aliyun or acs: key, no acs: value, no http:// or https://; on its OSS bucket keys of 64 bytes and values of 128,
https://www.alibabacloud.com/help/en/oss/support/0010-00000219); Google Cloud labels
https://cloud.google.com/resource-manager/docs/labels-overview#requirements (63 characters, lower-case letters of any
alphabet, digits, _ and -; a key starts with a letter); Tencent Cloud
https://www.tencentcloud.com/document/product/651/13354 (keys 127, values 255, letters, digits, spaces and
+ - = . _ : / @ ( ) [ ] , ; > <; keys starting with qcs:, project or 项目 reserved, so the stack's own `project`
tag is written as goldenenv-project on Tencent); Huawei Cloud's TMS
https://support.huaweicloud.com/intl/en-us/usermanual-tms/en-us_topic_0056266269.html (keys of 36 characters: letters,
digits, _ and -, Chinese included; values of 43: the same and .; so goldenenv:stack is written goldenenv-stack)."""

CLOUDS = clouds.names()
STACKS_BY_CLOUD: dict[str, str] = {}
for _cloud, _stack in pulumi_stacks():
    STACKS_BY_CLOUD.setdefault(_cloud, _stack)


@pytest.mark.parametrize("cloud", CLOUDS)
def test_every_cloud_says_its_tag_rule_or_why_it_has_none(cloud):
    import importlib

    module = importlib.import_module(f"goldenenv.clouds.{cloud}.tags")
    rule = tagrules.rule_of(cloud)
    if rule is None:
        assert len(module.NO_RULE) > 20, f"{cloud}: RULE = None needs NO_RULE saying why nothing is judged"
        assert cloud not in STACKS_BY_CLOUD or not clouds.get(cloud).uses_pulumi
        return
    assert rule.source.startswith("https://")
    if cloud not in ANCHORS:
        pytest.fail(f"add {cloud}'s row to ANCHORS in tests/unit/test_contract_tags.py: its tag key and value limits, "
                    f"reserved prefixes and refused characters, as literals from its page ({rule.source})",
                    pytrace=False)


@pytest.mark.parametrize("cloud", [c for c in CLOUDS if c in ANCHORS])
def test_each_rule_matches_its_clouds_page(cloud):
    rule, anchor = tagrules.rule_of(cloud), ANCHORS[cloud]
    assert (rule.key.max_chars, rule.value.max_chars) == (anchor["key_max"], anchor["value_max"])
    assert (rule.key.max_bytes, rule.value.max_bytes) == (anchor.get("key_bytes"), anchor.get("value_bytes")) \
        or cloud == "gcp"
    assert set(rule.key.reserved_prefixes) == set(anchor["key_prefixes"])
    assert set(rule.value.reserved_prefixes) == set(anchor["value_prefixes"])
    for char in anchor["refused"]:
        assert not rule.key.takes(char), (cloud, char)
    for char in anchor["taken"]:
        assert rule.key.takes(char) and rule.value.takes(char), (cloud, char)


def _spec_with(cloud: str, extra: dict[str, str], **tags: str):
    values, _ = stackconfig.namespaced(stackconfig.read_stack_file(STACKS / f"Pulumi.{STACKS_BY_CLOUD[cloud]}.yaml"))
    values = copy.deepcopy(values)
    values["tags"] = {**values["tags"], **tags, "extra": extra}
    return stackconfig.load(STACKS_BY_CLOUD[cloud], values)


def _refusals(cloud: str, extra: dict[str, str], **tags: str) -> list[str]:
    try:
        spec = _spec_with(cloud, extra, **tags)
        clouds.validate(spec)
    except ConfigError as e:
        return [str(p) for p in e.problems]
    return []


@pytest.mark.parametrize("cloud, stack", pulumi_stacks())
def test_the_shipped_stacks_tags_pass_their_clouds_rule(cloud, stack):
    values, _ = stackconfig.namespaced(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))
    spec = stackconfig.load(stack, values)
    assert tagrules.problems(tagrules.rule_of(cloud), spec) == []


WITH_RULE = [c for c in CLOUDS if c in STACKS_BY_CLOUD and tagrules.rule_of(c) is not None]


@pytest.mark.parametrize("cloud", WITH_RULE)
def test_a_key_and_a_value_over_the_clouds_length_are_refused_at_their_key(cloud):
    rule = tagrules.rule_of(cloud)
    if rule.rewrite is not None:
        pytest.skip(f"{cloud} writes tags in its own form, cut to fit (test_a_label_*)")
    long_key = "k" * (rule.key.max_chars + 1)
    assert any(p.startswith("goldenenv:tags.extra.kkkk") and f"at most {rule.key.max_chars} characters" in p
               for p in _refusals(cloud, {long_key: "v"}))
    assert any(p.startswith("goldenenv:tags.extra.team: ") and f"at most {rule.value.max_chars} characters" in p
               for p in _refusals(cloud, {"team": "v" * (rule.value.max_chars + 1)}))
    most = min(rule.key.max_chars, rule.key.max_bytes or rule.key.max_chars)
    assert _refusals(cloud, {"k" * most: "v" * rule.value.max_chars}) == []


@pytest.mark.parametrize("cloud", WITH_RULE)
def test_a_reserved_prefix_is_refused_in_a_key_and_where_the_cloud_says_in_a_value(cloud):
    rule = tagrules.rule_of(cloud)
    for prefix in rule.key.reserved_prefixes:
        found = _refusals(cloud, {f"{prefix}team": "v"})
        assert any(p.startswith(f"goldenenv:tags.extra.{prefix}team: ") and "reserves" in p for p in found), found
    for prefix in rule.value.reserved_prefixes:
        found = _refusals(cloud, {"team": f"{prefix}x"})
        assert any(p.startswith("goldenenv:tags.extra.team: ") and "value" in p for p in found), found


def test_azure_takes_a_percent_sign_in_a_value_and_refuses_it_in_a_name():
    assert _refusals("azure", {"budget": "50%"}) == []
    [problem] = _refusals("azure", {"Team%": "ml"})
    assert problem.startswith("goldenenv:tags.extra.Team%: Azure refuses the tag name 'Team%': it has '%'")


def test_azure_takes_a_tag_name_longer_than_awss():
    assert _refusals("azure", {"n" * 200: "x"}) == []
    assert any("AWS refuses the tag name" in p for p in _refusals("aws", {"n" * 200: "x"}))


def test_aws_refuses_a_percent_sign_and_a_reserved_value():
    assert any(p.startswith("goldenenv:tags.extra.budget: AWS refuses the value") and "'%'" in p
               for p in _refusals("aws", {"budget": "50%"}))
    assert any("goldenenv:tags.project: AWS refuses the value" in p for p in _refusals("aws", {}, project="AWS:x"))


def test_alibaba_refuses_a_key_its_oss_bucket_would_not_take():
    """65 bytes fit ECS's 128 characters but not the OSS bucket's 64 bytes, and the bucket carries the stack's tags."""
    assert _refusals("alicloud", {"k" * 64: "v"}) == []
    assert any("is 65 bytes (at most 64)" in p for p in _refusals("alicloud", {"k" * 65: "v"}))
    assert any("bytes" in p for p in _refusals("alicloud", {"é" * 40: "v"}))


def test_alibaba_refuses_a_link_in_a_key_or_a_value():
    assert any("holds http://" in p for p in _refusals("alicloud", {"team": "http://x"}))
    assert any("holds https://" in p for p in _refusals("alicloud", {"see-https://x": "v"}))


# ---------------------------------------------------------------- Google Cloud writes labels

@pytest.mark.parametrize("tag, label", [
    ("Équipe", "équipe"), ("Team", "team"), ("cost-center", "cost-center"), ("goldenenv:stack", "goldenenv_stack"),
    ("9lives", "k9lives"), ("チーム", "チ_ム"), ("Données", "données"),
])
def test_a_label_keeps_what_google_takes_international_letters_included(tag, label):
    """Google takes lower-case letters of any alphabet (\\p{Ll}, \\p{Lo}): É becomes é, not `_`; the long-vowel mark
    ー is a modifier letter (\\p{Lm}), which Google does not take."""
    assert labels.label_key(tag) == label


@pytest.mark.parametrize("tag", ["Équipe", "x" * 70, "日本" * 40, "İstanbul", "ǅemal", "_x", "-", "a b/c", "Ⅻ"])
def test_every_tag_becomes_a_label_google_takes(tag):
    rule = tagrules.rule_of("gcp")
    key, value = rule.rewrite(tag, tag)
    assert rule.key.findings(key) == [] and rule.value.findings(value) == [], (tag, key, value)
    assert len(value.encode()) < 128 and len(value) <= 63


@pytest.fixture(scope="module")
def gcp_plans(tmp_path_factory) -> dict[str, str]:
    """Each shipped GCP stack planned once with a tag Google writes differently, as `goldenenv plan` prints it."""
    out = {}
    for cloud, stack in pulumi_stacks():
        if cloud != "gcp":
            continue
        folder = tmp_path_factory.mktemp(stack)
        config = copy.deepcopy(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))
        config["goldenenv:tags"] = {**config["goldenenv:tags"], "extra": {"Équipe": "Données " + "x" * 70}}
        (folder / "Pulumi.relabelled.yaml").write_text(yaml.safe_dump({"config": config}, allow_unicode=True),
                                                       encoding="utf-8")
        result = CliRunner().invoke(app, ["plan", "-s", "relabelled", "--stacks-dir", str(folder)],
                                    env={"COLUMNS": "400"})
        assert result.exit_code in (0, 1), result.output
        out[stack] = " ".join(result.output.split())
    assert out, "no shipped GCP stack"
    return out


def test_the_plan_of_every_gcp_stack_names_each_tag_that_became_a_different_label(gcp_plans):
    cut = ("données_" + "x" * 70)[:63]
    for stack, output in gcp_plans.items():
        assert "key 'Équipe' -> 'équipe'" in output, stack
        assert f"'Données {'x' * 70}' -> '{cut}' (cut to 63 characters)" in output, stack
        assert "'goldenenv:stack' ->" not in output, stack

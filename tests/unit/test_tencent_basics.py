"""Tencent Cloud's facts as data, each anchored on Tencent's own words: the tag rule (50 tags, key 1-127, value 1-255,
qcs: / project / 项目 reserved), user data (16 KB after base64), the spot notice (UTC+8, 404 when none), the HCC
fabric's registration."""

from __future__ import annotations

import base64
import importlib.util
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from goldenenv import fabrics
from goldenenv.clouds.tencent import limits, tags
from goldenenv.clouds.tencent.basics import bucket_name, is_hcc, registry_names, role_name

NOTICE = Path(__file__).resolve().parents[2] / "goldenenv" / "clouds" / "tencent" / "spot_notice.py"


@pytest.mark.parametrize("key", ["qcs:owner", "project", "project:x", "Project", "PROJECT-a", "项目", "项目组"])
def test_a_reserved_key_is_refused_and_named_as_reserved(key):
    assert any("reserves" in why for why in tags.RULE.key.findings(key))


def test_the_stacks_own_project_tag_is_written_under_a_key_tencent_takes():
    key, value = tags.rewrite("project", "llm")
    assert (key, value) == ("goldenenv-project", "llm")
    assert tags.RULE.key.findings(key) == []
    assert tags.written({"project": "a", "owner": "b"}) == {"goldenenv-project": "a", "owner": "b"}


def test_key_and_value_lengths_are_tencents():
    assert tags.RULE.key.findings("k" * 127) == [] and tags.RULE.key.findings("k" * 128)
    assert tags.RULE.value.findings("v" * 255) == [] and tags.RULE.value.findings("v" * 256)
    assert tags.RULE.key.findings("") and tags.RULE.value.findings("")
    assert tags.MAX_TAGS == 50


def test_only_tencents_marks_are_taken():
    assert tags.RULE.value.findings("a+b-c=d.e_f:g/h@i(j)[k],l;m>n<o p") == []
    assert tags.RULE.value.findings("50%") and tags.RULE.key.findings("a&b") and tags.RULE.key.findings("a#b")


def test_leading_or_trailing_spaces_are_found():
    assert tags.edge_space_problems({" team": "a", "b": "c ", "d": "e f"}) == [(" team", "its name"),
                                                                              ("b", "its value")]


def test_user_data_is_16_kb_after_base64():
    assert limits.USER_DATA.max_bytes == 12288
    assert len(base64.b64encode(b"x" * limits.USER_DATA.max_bytes)) == 16 * 1024
    assert len(base64.b64encode(b"x" * (limits.USER_DATA.max_bytes + 1))) > 16 * 1024
    assert limits.USER_DATA.base64 and "16KB" in limits.USER_DATA.source


def _notice_module():
    spec = importlib.util.spec_from_file_location("tencent_spot_notice", NOTICE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_spot_notice_is_read_in_utc_plus_8():
    from goldenenv import spotwatch

    module = _notice_module()
    action, deadline, said = module.notice("2018-08-18 12:05:33\n", None, spotwatch)
    assert (action, said) == ("terminate", "2018-08-18 12:05:33")
    assert deadline == datetime(2018, 8, 18, 4, 5, 33, tzinfo=timezone.utc)
    assert module.NOTICE_PATH == "/latest/meta-data/spot/termination-time"
    assert module.METADATA_URL == "http://metadata.tencentyun.com"


def test_the_hcc_fabric_is_tencents_and_found_by_the_registry():
    fabric = fabrics.get("hcc")
    assert fabric is not None and fabric.cloud == "tencent" and fabric.label == "HCC RDMA"
    assert fabric.boot_check == ("goldenenv-hcc.service", "hcc-check.sh")


def test_hcc_types_and_names():
    assert is_hcc("HCCPNV4ane.58XLARGE1929") and not is_hcc("GN7.2XLARGE32")
    assert bucket_name("LLM", "tencent-hccpnv5-2node") == "goldenenv-llm-tencent-hccpnv5-2node-data"
    assert len(bucket_name("p" * 60, "s" * 60)) <= 50
    assert len(role_name("p" * 100, "s" * 100, "node")) <= 128
    instance, namespace, repo = registry_names("llm", "dev")
    assert all(len(n) <= 30 and n == n.lower() for n in (instance, namespace, repo))


@pytest.mark.parametrize("name", ["team-key", "alice@laptop.example", "a-very-long-key-pair-name-for-the-whole-team"])
def test_a_key_pair_name_is_one_tencent_takes(name):
    """CVM's KeyName: letters, digits and underscores, at most 25 (tencentcloud-sdk-python-cvm 3.1.178
    CreateKeyPairRequest and ImportKeyPairRequest): a `-` is refused at up."""
    from goldenenv.clouds.tencent.basics import short_name

    written = short_name("key", name)
    assert re.fullmatch(r"[A-Za-z0-9_]{1,25}", written), written
    assert short_name("key", name) != short_name("key", name + "2")

"""Every host's user data fits its cloud's limit, on every cloud and every shipped stack.

A host whose user data is over its cloud's limit is refused when it is launched: on AWS the GPU nodes of p5 and p4d
never came up (17 KB of cloud-config, 16 KB allowed), while `plan --strict` passed them. Each cloud declares its
limit (Cloud.user_data_limit, with its source) and where its program passes the user data; the shipped stacks,
planned with a golden image set as `up` requires, keep USER_DATA_HEADROOM of it free, and a stack over the limit is
refused by `plan --strict` naming the host and both sizes.
"""

from __future__ import annotations

import base64
import copy
import gzip
import random
from pathlib import Path

import pytest
import yaml

import goldenenv.clouds  # noqa: F401  (registers the clouds)
from goldenenv import project, stackconfig
from goldenenv.clouds import base
from goldenenv.plan import plan_config

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
GOLDEN_REF = "registry.example.com/team/golden@sha256:" + "ab" * 32
"""A pushed golden image, as `up` gives the program (`up` refuses a stack without one)."""
PUBLISHED_LIMITS = {"aws": 16 * 1024, "alicloud": 32 * 1024, "gcp": 256 * 1024, "azure": 65535, "tencent": 12 * 1024, "huawei": 32 * 1024}
"""Anchors from each cloud's documentation: AWS "User data is limited to 16 KB, in raw form, before it is
base64-encoded"; Alibaba "Before user data is encoded in Base64, the user data can only be up to 32 KB"; Compute
Engine: a metadata value is limited to 256 KB; Azure OSProfile.customData: "The maximum length of the binary array
is 65535 bytes"; Tencent CVM RunInstances UserData: 16 KB after base64 (tencentcloud-iac-pulumi's user_data_raw: "Up to
16 KB after base64 encoded"), 12 KB before it; Huawei ECS user_data: "the user data is at most 32 KB before
base64 encoding" (huaweicloudsdkecs 3.1.219 PrePaidServer.user_data, the CreateServers body)."""


def cloud_of(path: Path) -> str:
    return stackconfig.read_stack_file(path)["goldenenv:cloud"]


PULUMI_CLOUDS = [name for name in base.names() if base.get(name).uses_pulumi]
SHIPPED = sorted((cloud_of(p), p.name.removeprefix("Pulumi.").removesuffix(".yaml"))
                 for p in STACKS.glob("Pulumi.*.yaml") if cloud_of(p) in PULUMI_CLOUDS)


def config_with_image(stack: str) -> dict:
    config = copy.deepcopy(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))
    config["goldenenv:image"] = {**(config.get("goldenenv:image") or {}), "ref": GOLDEN_REF}
    return config


def hosts(result, limit: base.UserDataLimit) -> dict[str, bytes]:
    """Resource name -> the user data it gives a host, as the host receives it."""
    found = {}
    for resource in result.resources:
        data = limit.carried(resource)
        if data is not None:
            found[resource.name] = data
    return found


@pytest.mark.parametrize("cloud", PULUMI_CLOUDS)
def test_every_cloud_declares_its_user_data_limit_with_its_source(cloud):
    limit = base.get(cloud).user_data_limit
    assert limit is not None, f"{cloud} declares no user_data_limit (clouds/base.py UserDataLimit)"
    assert limit.max_bytes > 0 and limit.inputs and limit.source.startswith("https://")
    if cloud in PUBLISHED_LIMITS:
        assert limit.max_bytes == PUBLISHED_LIMITS[cloud]
    assert any(c == cloud for c, _ in SHIPPED), f"{cloud} ships no stack to hold to its limit"


@pytest.mark.parametrize(("cloud", "stack"), SHIPPED)
def test_every_hosts_user_data_fits_its_cloud_with_headroom(cloud, stack):
    """Each node (template) and the head carry a #cloud-config cloud-init reads, at most USER_DATA_HEADROOM
    (90 %) of the cloud's limit."""
    limit = base.get(cloud).user_data_limit
    result = plan_config(stack, config_with_image(stack), strict=True)
    carried = hosts(result, limit)
    assert len(carried) >= (2 if result.spec.scheduler == "slurm" else 1), carried.keys()
    room = int(limit.max_bytes * base.USER_DATA_HEADROOM)
    too_big = {name: len(data) for name, data in carried.items() if len(data) > room}
    assert not too_big, f"over {room:,} bytes ({base.USER_DATA_HEADROOM:.0%} of {limit.max_bytes:,}): {too_big}"
    for name, data in carried.items():
        text = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode()  # cloud-init reads gzip too
        assert text.startswith("#cloud-config\n"), name
        assert yaml.safe_load(text)["write_files"], name
    assert not [f for f in result.findings if f.rule.endswith("user-data-size")]


def _incompressible(size: int) -> str:
    """`size` random base64 letters (seeded): gzip keeps about three quarters of them."""
    return base64.b64encode(random.Random(39).randbytes(size))[:size].decode()


@pytest.fixture
def padded_templates(tmp_path):
    """A project whose own launch.env template adds `pad` bytes to every host's user data: random letters, which a
    cloud that gzips its user data (Tencent) cannot shrink below the limit."""

    def make(pad: int) -> None:
        root = tmp_path / "infra"
        own = root / "templates" / "node" / "launch.env.j2"
        own.parent.mkdir(parents=True)
        (root / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "mine", "runtime": "python"}))
        own.write_text((REPO / "templates" / "node" / "launch.env.j2").read_text() + "#" + _incompressible(pad) + "\n")
        project.use(project.find(root))

    yield make
    project.use(None)


@pytest.mark.parametrize(("cloud", "stack"), [next(s for s in SHIPPED if s[0] == c) for c in PULUMI_CLOUDS])
def test_a_host_over_its_clouds_limit_is_refused_by_plan_strict_naming_it_and_the_sizes(cloud, stack,
                                                                                        padded_templates):
    limit = base.get(cloud).user_data_limit
    padded_templates(limit.max_bytes)
    result = plan_config(stack, config_with_image(stack), strict=True)
    over = {name: len(data) for name, data in hosts(result, limit).items() if len(data) > limit.max_bytes}
    assert over
    refused = [f for f in result.findings if f.rule.startswith("strict:") and f.rule.endswith("user-data-size")]
    assert refused and all(f.severity.value == "error" for f in refused)
    for name, size in over.items():
        assert any(f"'{name}'" in f.message and f"{size:,} bytes" in f.message
                   and f"{limit.max_bytes:,}" in f.message for f in refused), (name, [f.message for f in refused])
    assert result.failed

"""Alibaba Cloud's rule for the tags on its resources: checked on a stack's tags by clouds.tagrules.

From Alibaba Cloud's Tag structure (SOURCE): "The key can be up to 128 characters in length. It cannot start with
aliyun or acs: and cannot contain http:// or https://"; "The value can be up to 128 characters in length. It cannot
start with acs: and cannot contain http:// or https://". The stack's tags also go on its OSS bucket (storage.
bucket_tags), where a key is at most 64 bytes and a value at most 128 bytes (OSS_SOURCE: "The tag key can be up to
64 bytes in length. The tag key cannot start with http://, https://, or Aliyun"; "The tag value can be up to 128
bytes"), so those byte limits hold too. No character set is stated for ECS keys or values.
"""

from __future__ import annotations

from goldenenv.clouds.tagrules import TagRule, TextRule

SOURCE = "https://www.alibabacloud.com/help/en/emr/emr-on-ecs/developer-reference/api-emr-2021-03-20-struct-tag"
OSS_SOURCE = "https://www.alibabacloud.com/help/en/oss/support/0010-00000219"
NO_LINKS = ("http://", "https://")

RULE = TagRule("Alibaba Cloud", "tag", source=SOURCE,
               key=TextRule(max_chars=128, min_chars=1, max_bytes=64, reserved_prefixes=("aliyun", "acs:"),
                            refused_parts=NO_LINKS),
               value=TextRule(max_chars=128, max_bytes=128, reserved_prefixes=("acs:",), refused_parts=NO_LINKS))

"""Alibaba Cloud's rule for the tags on its resources: checked on a stack's tags by clouds.tagrules.

From Alibaba Cloud's Tag structure (SOURCE): "The key can be up to 128 characters in length. It cannot start with
aliyun or acs: and cannot contain http:// or https://"; "The value can be up to 128 characters in length. It cannot
start with acs: and cannot contain http:// or https://". No character set is stated for keys or values.
"""

from __future__ import annotations

from goldenenv.clouds.tagrules import TagRule, TextRule

SOURCE = "https://www.alibabacloud.com/help/en/emr/emr-on-ecs/developer-reference/api-emr-2021-03-20-struct-tag"
NO_LINKS = ("http://", "https://")

RULE = TagRule("Alibaba Cloud", "tag", source=SOURCE,
               key=TextRule(max_chars=128, min_chars=1, reserved_prefixes=("aliyun", "acs:"), refused_parts=NO_LINKS),
               value=TextRule(max_chars=128, reserved_prefixes=("acs:",), refused_parts=NO_LINKS))

"""AWS's rule for the tags on its resources (every resource of an AWS stack carries the stack's tags, through the
provider's default_tags): checked on a stack's tags by clouds.tagrules.

From AWS's tag restrictions (SOURCE): keys 1 to 128 Unicode characters, values 0 to 256; letters, numbers and spaces
representable in UTF-8 and + - = . _ : / @; `aws:` in any case is reserved as a prefix of keys and of values.
"""

from __future__ import annotations

from goldenenv.clouds.tagrules import TagRule, TextRule

SOURCE = "https://docs.aws.amazon.com/batch/latest/userguide/tag-restrictions.html"
"""The same words are in every service's tag reference (e.g. the ECS Tag type, https://docs.aws.amazon.com/
AWSCloudFormation/latest/UserGuide/aws-properties-ecs-service-tag.html): "Maximum key length – 128 Unicode
characters in UTF-8; Maximum value length – 256 ... letters, numbers, spaces representable in UTF-8, and the
following characters: + - = . _ : / @ ... Don't use `aws:`, `AWS:`, or any upper or lowercase combination of such as
a prefix for either keys or values"."""
MARKS = " +-=._:/@"
RESERVED = ("aws:",)

RULE = TagRule("AWS", "tag", source=SOURCE,
               key=TextRule(max_chars=128, min_chars=1, letters="any", marks=MARKS, reserved_prefixes=RESERVED),
               value=TextRule(max_chars=256, letters="any", marks=MARKS, reserved_prefixes=RESERVED))

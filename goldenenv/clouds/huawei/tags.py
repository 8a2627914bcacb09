"""Huawei Cloud's rule for the tags on its resources (TMS): checked on a stack's tags by clouds.tagrules.

From Huawei's tag rules (SOURCE, updated 2025-10-30; docs/research/huawei.md §9): a key is 1 to 36 characters of
letters (Chinese included), digits, `_` and `-`; a value at most 43 characters of the same and `.`. A resource takes
at most 10 tags (regional pages and the ECS API's "up to 10 tags per server at creation": MAX_TAGS), which Cloud.check
counts. Reserved prefixes (`_sys_`) were not found on a page read (unverified): none is judged.

goldenenv's own stack tag `goldenenv:stack` would carry a `:`, which Huawei refuses: it is written as
`goldenenv-stack` (STACK_KEY) on every resource (the program's tags go through `written`), and the stop function
and the bill are read by that key.
"""

from __future__ import annotations

from goldenenv.clouds.tagrules import TagRule, TextRule
from goldenenv.spec import STACK_TAG_KEY

SOURCE = "https://support.huaweicloud.com/intl/en-us/usermanual-tms/en-us_topic_0056266269.html"
MAX_TAGS = 10
STACK_KEY = "goldenenv-stack"
"""How the stack tag is written on Huawei."""


def rewrite(key: str, value: str) -> tuple[str, str]:
    """The stack tag under a key Huawei takes; every other tag as it is (a key the user wrote that Huawei refuses
    is refused, not renamed)."""
    return (STACK_KEY, value) if key == STACK_TAG_KEY else (key, value)


def written(tags: dict[str, str]) -> dict[str, str]:
    """The stack's tags as the program writes them on Huawei's resources."""
    return dict(rewrite(k, v) for k, v in tags.items())


RULE = TagRule("Huawei Cloud", "tag", source=SOURCE,
               key=TextRule(max_chars=36, min_chars=1, marks="_-"),
               value=TextRule(max_chars=43, marks="_-."),
               rewrite=rewrite)

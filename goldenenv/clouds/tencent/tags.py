"""Tencent Cloud's rule for the tags on its resources: checked on a stack's tags by clouds.tagrules.

From Tencent Cloud's tag limits (SOURCE, 2025-09-02; the China site's page, CN_SOURCE, 2026-01-14, says the same): a
key is 1 to 127 characters and a value 1 to 255; letters, digits, spaces (not leading or trailing) and
`+ - = . _ : / @ ( ) [ ] , ; > <`; keys starting with `qcs:`, `project` or `项目` are the system's ("qcs:、project、项目
开头的标签键为系统预留标签键"; the older 2024 text said `qcs:` and `project:`). Whether the reserved `project` is
matched case-insensitively is not said: tagrules compares prefixes case-insensitively, which refuses more, never
less. At most 50 tags per resource (MAX_TAGS), which Cloud.check counts.

The stack's own `project` tag (goldenenv:tags.project) would start with a reserved prefix: on Tencent every stack tag
key is written as it is except that one, which `rewrite` writes as `goldenenv-project` (PROJECT_KEY), the same on
every resource (the program's tags go through `written`).
"""

from __future__ import annotations

from goldenenv.clouds.tagrules import TagRule, TextRule

SOURCE = "https://www.tencentcloud.com/document/product/651/13354"
CN_SOURCE = "https://cloud.tencent.com/document/product/651/13354"
MAX_TAGS = 50
"""Tags one resource carries at most (SOURCE)."""
MARKS = " +-=._:/@()[],;><"
"""What a key or value takes besides letters and digits (SOURCE)."""
RESERVED = ("qcs:", "project", "项目")
PROJECT_KEY = "goldenenv-project"
"""How the stack's `project` tag is written on Tencent, whose keys starting with `project` are reserved."""


def rewrite(key: str, value: str) -> tuple[str, str]:
    """The stack's `project` tag under a key Tencent takes; every other tag as it is (a reserved key the user wrote
    is refused, not renamed)."""
    return (PROJECT_KEY, value) if key == "project" else (key, value)


def written(tags: dict[str, str]) -> dict[str, str]:
    """The stack's tags as the program writes them on Tencent's resources."""
    return dict(rewrite(k, v) for k, v in tags.items())


RULE = TagRule("Tencent Cloud", "tag", source=SOURCE,
               key=TextRule(max_chars=127, min_chars=1, marks=MARKS, reserved_prefixes=RESERVED),
               value=TextRule(max_chars=255, min_chars=1, marks=MARKS),
               rewrite=rewrite)


def edge_space_problems(tags: dict[str, str]) -> list[tuple[str, str]]:
    """(key, why) for each key or value with a leading or trailing space, which Tencent refuses (SOURCE)."""
    return [(k, "its name" if k != k.strip() else "its value") for k, v in tags.items()
            if k != k.strip() or v != v.strip()]

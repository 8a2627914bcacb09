"""Google Cloud's rule for labels, the form its resources carry the stack's tags in: checked by clouds.tagrules on
what each tag becomes (labels.label_key, labels.label_value), so the rule holds of every label the program writes;
the plan names each tag that became a different label (labels.rewrites)."""

from __future__ import annotations

from goldenenv.clouds.gcp import labels
from goldenenv.clouds.tagrules import TagRule, TextRule


def _as_label(key: str, value: str) -> tuple[str, str]:
    return labels.label_key(key), labels.label_value(value)


RULE = TagRule("Google Cloud", "label", source=labels.SOURCE, rewrite=_as_label,
               key=TextRule(max_chars=labels.MAX_LENGTH, min_chars=1, max_bytes=labels.MAX_BYTES, letters="lower",
                            marks="_-", first="letter"),
               value=TextRule(max_chars=labels.MAX_LENGTH, max_bytes=labels.MAX_BYTES, letters="lower", marks="_-"))

"""Azure's tag rules, applied once to the stack's tags: every taggable Azure resource carries them.

azure-native resources do not inherit the resource group's tags (learn.microsoft.com tag-resources: "Tags applied
to the resource group are not inherited"), so the program writes them on each resource, as they are: Azure takes
goldenenv's keys (`goldenenv:stack`, `cost-center`) unchanged, and no rule forces another form. What Azure refuses
is the user's to fix, and `problems` names it (check() files each under goldenenv:tags):

- at most MAX_TAGS name/value pairs on a resource, goldenenv's own included;
- names of at most MAX_NAME characters (MAX_STORAGE_ACCOUNT_NAME on a storage account), values of at most MAX_VALUE;
- no `<`, `>`, `%`, `&`, `\\`, `?` or `/` in a name;
- names are case-insensitive ("Tag names are case-insensitive for operations"), so two keys differing only in case
  are one tag and the second overwrites the first;
- no name starting with a prefix Azure reserves (RESERVED_PREFIXES, compared case-insensitively).

Sources: LIMITS_SOURCE (read in MicrosoftDocs azure-docs articles/azure-resource-manager/management/tag-resources.md,
"Limitations"); RESERVED_SOURCE for the prefixes.
"""

from __future__ import annotations

from collections.abc import Mapping

from goldenenv.clouds.tagrules import TagRule, TextRule

MAX_TAGS = 50
MAX_NAME = 512
MAX_STORAGE_ACCOUNT_NAME = 128
MAX_VALUE = 256
FORBIDDEN_CHARACTERS = "<>%&\\?/"
RESERVED_PREFIXES = ("azure", "windows", "microsoft")
LIMITS_URL = "https://learn.microsoft.com/azure/azure-resource-manager/management/tag-resources#limitations"
LIMITS_SOURCE = (f"{LIMITS_URL}: "
                 "50 tag name-value pairs per resource; names up to 512 characters (128 on storage accounts), values "
                 "up to 256; names can't contain < > % & \\ ? /; names are case-insensitive for operations")
RESERVED_SOURCE = ("ARM Tags - Create Or Update (predefined tag names): \"Tag names cannot have the following prefixes "
                   "which are reserved for Azure use: 'microsoft', 'azure', 'windows'\" (read in the Azure SDKs' "
                   "generated docs; that resource tags are refused with them too is unverified)")

RULE = TagRule("Azure", "tag", source=LIMITS_URL,
               key=TextRule(max_chars=MAX_NAME, min_chars=1, refused=FORBIDDEN_CHARACTERS,
                            reserved_prefixes=RESERVED_PREFIXES),
               value=TextRule(max_chars=MAX_VALUE))
"""Azure's rule for one tag, key and value apart (clouds.tagrules checks a stack's tags with it): a value takes any
character, `%` included; a name none of < > % & \\ ? /."""


def tags(stack_tags: Mapping[str, str]) -> dict[str, str]:
    """The stack's tags as the program writes them on every taggable Azure resource: unchanged."""
    return dict(stack_tags)


def _shown(text: str, room: int = 40) -> str:
    return repr(text if len(text) <= room else text[:room] + "...")


def problems(tag_set: Mapping[str, str | None], *, storage_account: bool = False, each_tag: bool = True) -> list[str]:
    """Why Azure would refuse these tags on a resource (a storage account when ``storage_account``); empty when it
    takes them. Pass every tag the resource carries, goldenenv's own (goldenenv:stack, ...) included. Without
    ``each_tag``, only what is wrong with the set (too many, two names one in Azure's eyes): a stack's tags are
    judged one by one by clouds.tagrules with RULE, at the keys the user wrote."""
    found: list[str] = []
    if len(tag_set) > MAX_TAGS:
        found.append(f"{len(tag_set)} tags; an Azure resource takes at most {MAX_TAGS} (goldenenv's own included): "
                     f"drop {len(tag_set) - MAX_TAGS} of goldenenv:tags.extra")
    most = MAX_STORAGE_ACCOUNT_NAME if storage_account else MAX_NAME
    seen: dict[str, str] = {}
    for name, value in tag_set.items():
        name = str(name)
        other = seen.setdefault(name.lower(), name)
        if other != name:
            found.append(f"tags {other!r} and {name!r} are one tag on Azure (tag names are case-insensitive): "
                         f"rename or drop one")
        if not each_tag:
            continue
        bad = sorted({c for c in name if c in FORBIDDEN_CHARACTERS})
        if bad:
            found.append(f"tag name {_shown(name)} holds {' '.join(bad)}, which Azure refuses in a tag name "
                         f"(< > % & \\ ? /): rename it, e.g. {_shown(''.join('-' if c in bad else c for c in name))}")
        prefix = next((p for p in RESERVED_PREFIXES if name.lower().startswith(p)), None)
        if prefix:
            found.append(f"tag name {_shown(name)} starts with {prefix!r}, a prefix Azure reserves (azure, windows, "
                         f"microsoft, in any case): rename it")
        if len(name) > most:
            where = "a storage account's" if storage_account else "a"
            found.append(f"tag name {_shown(name)} is {len(name)} characters; Azure allows {most} in {where} tag "
                         f"name: shorten it")
        if isinstance(value, str) and len(value) > MAX_VALUE:
            found.append(f"tag {_shown(name)} has a value of {len(value)} characters; Azure allows {MAX_VALUE}: "
                         f"shorten it")
    return found

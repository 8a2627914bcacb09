"""Which resources take tags, and under which input, as each provider's SDK declares it.

untagged-resource asks only what can carry tags; the answer comes from the SDK class behind a type token
(imported on first use, never at import time) and the provider's facts (``tag_input``: "labels" on Google Cloud).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import keyword
import re
import warnings
from collections.abc import Iterable

from goldenenv.guardrails.facts import ProviderFacts, provider_facts


_TOKEN = re.compile(r"^(?P<pkg>[a-z][a-z0-9-]*):(?P<module>[A-Za-z0-9_/.-]+):(?P<cls>[A-Za-z_][A-Za-z0-9_]*)$")


def _sdk_class(type_token: str) -> type | None:
    """The Python SDK class behind a type token, imported lazily; None when the SDK has no such class."""
    match = _TOKEN.match(type_token)
    if match is None or match["pkg"] == "pulumi":
        return None
    package = "pulumi_" + match["pkg"].replace("-", "_")
    module = match["module"]
    # "ec2/vpc" names module ec2 (the lower-cased class is the file); "apps/v1" style tokens name the full path.
    candidates = [module.rsplit("/", 1)[0], module] if "/" in module else [module]
    for candidate in candidates:
        path = package if candidate == "index" else f"{package}.{candidate.replace('/', '.').replace('-', '_')}"
        path = ".".join(part + "_" if keyword.iskeyword(part) else part for part in path.split("."))  # lambda_
        if not all(part.isidentifier() for part in path.split(".")):
            continue
        try:
            with warnings.catch_warnings():  # SDK modules warn about their deprecated members on import
                warnings.simplefilter("ignore", DeprecationWarning)
                found = getattr(importlib.import_module(path), match["cls"], None)
        except ImportError:
            continue
        if inspect.isclass(found):
            return found
    return None


def _snake(name: str) -> str:
    """An engine (camelCase) input name as the SDK's keyword ("tagsAll" -> "tags_all")."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _package(type_token: str) -> str:
    """The provider package of a type token ("gcp" of "gcp:compute/instance:Instance"): its facts' name."""
    return type_token.split(":", 1)[0]


def facts_of(type_token: str, providers: Iterable[ProviderFacts] | None = None) -> ProviderFacts | None:
    """The facts of the provider whose package issues ``type_token`` (among ``providers``; by default every
    provider's, found on first use), or None."""
    package = _package(type_token)
    return next((f for f in (provider_facts() if providers is None else providers) if f.name == package), None)


def _tag_key(facts: ProviderFacts | None, type_token: str) -> str:
    if facts is None:
        return ProviderFacts.tag_input
    return facts.tag_input_by_type.get(type_token, facts.tag_input)


def tag_input(type_token: str, providers: Iterable[ProviderFacts] | None = None) -> str:
    """The input that holds the key/value tags of resources of this type ("tags"; "labels" on Google Cloud)."""
    if not _TOKEN.match(type_token):
        return ProviderFacts.tag_input
    return _tag_key(facts_of(type_token, providers), type_token)


def is_taggable(type_token: str, input_name: str | None = None) -> bool:
    """Whether resources of this type accept key/value tags, as the provider SDK declares it: its class takes the
    provider's tag input (``tag_input``: "tags", or "labels" for pulumi-gcp, whose `tags` are network tags).

    Provider resources and component resources are never taggable here: their tags are not the cloud's.
    """
    return _takes_input(type_token, _snake(input_name or tag_input(type_token)))


@functools.cache
def _takes_input(type_token: str, name: str) -> bool:
    cls = _sdk_class(type_token)
    if cls is None:
        return False
    import pulumi  # lazily: keeps this module free of work at import time

    if not issubclass(cls, pulumi.CustomResource) or issubclass(cls, pulumi.ProviderResource):
        return False
    for constructor in (getattr(cls, "_internal_init", None), cls.__init__):
        if constructor is None:
            continue
        try:
            if name in inspect.signature(constructor).parameters:
                return True
        except (TypeError, ValueError):
            continue
    return False

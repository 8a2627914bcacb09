"""Which modules goldenenv's extras install (`goldenenv[aws]`: pulumi_aws), read from goldenenv's installed metadata,
whether a failed import stopped at one of them (an extra is missing) rather than at a fault in goldenenv, and which
extra adds a missing one.

Below the registry of clouds (clouds/__init__.py, whose `load` turns such an import into ProviderMissing) and the
guardrails' discovery of each cloud's facts (guardrails/facts.py, which skips a cloud whose extra is missing), which
both ask it; it imports nothing of goldenenv.
"""

import importlib.metadata
import re

PROVIDER_PREFIX = "pulumi_"
"""Every Pulumi provider SDK's Python package starts so (pulumi_aws, pulumi_azure_native: the import name of the
pulumi-<provider> distribution, https://www.pulumi.com/docs/iac/languages-sdks/python/)."""
EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
"""The marker of a requirement an extra asks for (`pulumi-aws==7.51.1; extra == "aws"`), as the metadata writes
it (https://packaging.python.org/en/latest/specifications/core-metadata/#provides-extra-multiple-use)."""


def module_of(requirement: str) -> str:
    """The import name of a requirement's distribution, by the convention the providers follow:
    pulumi-azure-native==3.29.0 -> pulumi_azure_native."""
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("-", "_")


def extras() -> dict[str, set[str]]:
    """Each extra of goldenenv's installed metadata, in the order it lists them, with the import names of the
    distributions it asks for; empty when goldenenv is not installed."""
    try:
        metadata = importlib.metadata.metadata("goldenenv")
        requires = importlib.metadata.requires("goldenenv") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    found: dict[str, set[str]] = {name: set() for name in metadata.get_all("Provides-Extra") or []}
    for requirement in requires:
        marker, module = EXTRA_MARKER.search(requirement), module_of(requirement)
        if marker and module != "goldenenv":  # goldenenv[all] names other extras, not a module to install
            found.setdefault(marker[1], set()).add(module)
    return found


def extra_for(module: str, cloud: str) -> str | None:
    """The extra that installs a missing module: the cloud's own extra when it has one, else the extra whose
    requirements hold the module (a cloud built on another cloud's provider: that cloud's extra); None when no
    extra holds it."""
    known = extras()
    if cloud in known:
        return cloud
    top = module.split(".")[0]
    return next((name for name, modules in known.items() if top in modules), None)


def is_provider(error: ModuleNotFoundError, cloud: str) -> bool:
    """Whether a failed import stopped at a cloud's provider SDK: a Pulumi provider package, or a module an extra
    installs (what a user adds with the registry's install_command), rather than at a fault in goldenenv."""
    top = (error.name or "").split(".")[0]
    return top.startswith(PROVIDER_PREFIX) or any(top in modules for modules in extras().values())

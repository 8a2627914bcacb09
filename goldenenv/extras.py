"""Which modules a cloud's extra installs (`goldenenv[aws]`: pulumi_aws), read from goldenenv's installed metadata,
and whether a failed import stopped at one of them (the extra is missing) rather than at a fault in goldenenv.

Below the registry of clouds (clouds/__init__.py, whose `load` turns such an import into ProviderMissing) and the
guardrails' discovery of each cloud's facts (guardrails/facts.py, which skips a cloud whose extra is missing), which
both ask it; it imports nothing of goldenenv.
"""

import importlib.metadata
import re

PROVIDER_PREFIX = "pulumi_"
"""Every Pulumi provider SDK's Python package starts so (pulumi_aws, pulumi_azure_native: the import name of the
pulumi-<provider> distribution, https://www.pulumi.com/docs/iac/languages-sdks/python/)."""


def _extra_modules(cloud: str) -> set[str]:
    """The import names of the distributions goldenenv's extra for this cloud asks for, from the installed
    metadata (`pulumi-aws==7.51.1; extra == "aws"` -> pulumi_aws); empty when goldenenv is not installed."""
    try:
        requires = importlib.metadata.requires("goldenenv") or []
    except importlib.metadata.PackageNotFoundError:
        return set()
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(cloud)}["']""")
    return {re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower().replace("-", "_")
            for r in requires if marker.search(r)}


def is_provider(error: ModuleNotFoundError, cloud: str) -> bool:
    """Whether a failed import stopped at a cloud's provider SDK: a Pulumi provider package, or a module the cloud's
    extra installs (what a user adds with install_command), rather than at a fault in goldenenv."""
    top = (error.name or "").split(".")[0]
    return top.startswith(PROVIDER_PREFIX) or top in _extra_modules(cloud)

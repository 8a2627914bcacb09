"""Clouds by name: every package under goldenenv/clouds/ is one cloud, found without a list to edit.

A cloud package defines one class whose `name` is the package's name (AwsCloud in clouds/aws, ...). Each is
imported only when its cloud is used, so a stack on one cloud never loads another cloud's provider SDK.

A cloud's provider SDK (pulumi_aws, ...) is an extra of goldenenv's named after the cloud (`goldenenv[aws]`), which
only those who use that cloud install: the local flow needs none. A cloud built on another cloud's provider (a copy of
its folder) has no extra of its own: the extra that holds that provider adds it. Looking a cloud up for work that
needs its provider (`get`, `load`) while the provider is missing raises ProviderMissing, which says the one command
that adds it.
"""

import importlib
import inspect
import pkgutil

from goldenenv.clouds.base import DESTROYING_ENV, BuildContext, Capability, Cloud, get, names, register, validate
from goldenenv.extras import extra_for, is_provider
from goldenenv.spec import ConfigError, Problem


def install_command(cloud: str, module: str = "") -> str:
    """The one command that adds a cloud's missing provider module: setup.sh in a checkout, else pip, with the extra
    that installs it (the cloud's own; for a cloud built on another cloud's provider, the extra that holds that
    provider); the module's own pip install where no extra of goldenenv holds it."""
    extra = extra_for(module, cloud)
    if extra is not None:
        return f"./scripts/setup.sh --cloud {extra} (or pip install 'goldenenv[{extra}]')"
    if module:
        return f"pip install {module.split('.')[0].replace('_', '-')} (no extra of goldenenv installs it)"
    return f"install the provider goldenenv/clouds/{cloud}/ imports (no extra of goldenenv is named {cloud})"


class ProviderMissing(ConfigError):
    """A cloud was looked up for work that needs its provider SDK, and that SDK is not installed (the extra was not
    asked for at set-up). Rendered as any bad input is: a heading, then the key and what to do; exit 2."""

    heading = "a cloud's provider is not installed"
    about = "install"
    """Not about the stack file, so a command names no file under the heading."""

    def __init__(self, cloud: str, module: str):
        super().__init__([Problem("goldenenv:cloud", f"{cloud} needs its provider: {install_command(cloud, module)}")])
        self.cloud = cloud
        self.module = module
        """The provider module that could not be imported (pulumi_aws)."""


def load(cloud: str, module: str = ""):
    """goldenenv.clouds.<cloud>[.<module>], imported; ProviderMissing when the import stops at the cloud's provider
    SDK (a Pulumi provider package, or a module its extra installs). Any other missing module is a fault, raised."""
    name = f"{__name__}.{cloud}" + (f".{module}" if module else "")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if is_provider(e, cloud):
            raise ProviderMissing(cloud, e.name or "") from None
        raise


def installed(cloud: str) -> bool:
    """Whether the cloud's package imports, its provider with it (False: its extra is not installed)."""
    try:
        load(cloud)
    except ProviderMissing:
        return False
    return True


def _factory(package: str):
    def make() -> Cloud:
        module = load(package)
        found = [c for _, c in inspect.getmembers(module, inspect.isclass)
                 if c.__module__ == module.__name__ and getattr(c, "name", None) == package
                 and hasattr(c, "build")]
        if len(found) != 1:
            raise RuntimeError(f"goldenenv/clouds/{package} must define one cloud class whose name is "
                               f"{package!r}; found {len(found)}")
        return found[0]()

    return make


for _info in pkgutil.iter_modules(__path__):
    if _info.ispkg:
        register(_info.name, _factory(_info.name))

__all__ = ["DESTROYING_ENV", "BuildContext", "Capability", "Cloud", "ProviderMissing", "get", "install_command",
           "installed", "is_provider", "load", "names", "register", "validate"]

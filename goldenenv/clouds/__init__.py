"""Clouds by name: every package under goldenenv/clouds/ is one cloud, found without a list to edit.

A cloud package defines one class whose `name` is the package's name (AwsCloud in clouds/aws, ...). Each is
imported only when its cloud is used, so a stack on one cloud never loads another cloud's provider SDK.
"""

import importlib
import inspect
import pkgutil

from goldenenv.clouds.base import DESTROYING_ENV, BuildContext, Capability, Cloud, get, names, register, validate


def _factory(package: str):
    def make() -> Cloud:
        module = importlib.import_module(f"{__name__}.{package}")
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

__all__ = ["DESTROYING_ENV", "BuildContext", "Capability", "Cloud", "get", "names", "register", "validate"]

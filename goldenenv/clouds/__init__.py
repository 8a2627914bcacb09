"""Clouds by name. Each factory imports its provider SDK only when that cloud is used."""

from goldenenv.clouds.base import Capability, Cloud, get, names, register, validate


def _aws() -> Cloud:
    from goldenenv.clouds.aws import AwsCloud

    return AwsCloud()


register("aws", _aws)

__all__ = ["Capability", "Cloud", "get", "names", "register", "validate"]

"""Clouds by name. Each factory imports its provider SDK only when that cloud is used."""

from goldenenv.clouds.base import BuildContext, Capability, Cloud, get, names, register, validate


def _aws() -> Cloud:
    from goldenenv.clouds.aws import AwsCloud

    return AwsCloud()


def _alicloud() -> Cloud:
    from goldenenv.clouds.alicloud import AlicloudCloud

    return AlicloudCloud()


def _local() -> Cloud:
    from goldenenv.clouds.local import LocalCloud

    return LocalCloud()


register("aws", _aws)
register("alicloud", _alicloud)
register("local", _local)

__all__ = ["BuildContext", "Capability", "Cloud", "get", "names", "register", "validate"]

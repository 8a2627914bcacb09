"""A cloud whose provider is missing is told the command that adds it, from goldenenv's installed metadata: its own
extra, or, for a cloud built on another cloud's provider (a copy of that cloud's folder, with no extra of its own),
the extra whose requirements hold the provider; where no extra holds it, the provider's own pip install. Never a
command that does not exist (`goldenenv[acmecloud]`), never an ImportError.

The metadata is a fake goldenenv distribution put first on sys.path, and the provider's absence is staged by a
meta-path finder that refuses it, as in a virtualenv set up without that cloud's extra.
"""

from __future__ import annotations

import sys

import pytest

from goldenenv import clouds, extras
from goldenenv.clouds import ProviderMissing

METADATA = """Metadata-Version: 2.1
Name: goldenenv
Version: 9.9.9
Provides-Extra: aws
Provides-Extra: alicloud
Provides-Extra: all
Provides-Extra: test
Requires-Dist: pydantic==2.14.4
Requires-Dist: pulumi-aws==7.51.1; extra == "aws"
Requires-Dist: boto3==1.44.8; extra == "aws"
Requires-Dist: pulumi-alicloud==4.0.0; extra == "alicloud"
Requires-Dist: goldenenv[alicloud,aws]; extra == "all"
Requires-Dist: goldenenv[all]; extra == "test"
Requires-Dist: moto==5.2.5; extra == "test"
"""
"""goldenenv's metadata as pip writes it for pyproject.toml's extras (two clouds, `all` and `test`)."""


@pytest.fixture
def metadata(tmp_path, monkeypatch):
    """The fake distribution, found before the installed one."""
    info = tmp_path / "site" / "goldenenv-9.9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(METADATA, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return info


class Refuse:
    """A meta-path finder under which the named top-level modules are not installed."""

    def __init__(self, *refused: str):
        self.refused = refused

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.refused:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def refuse(monkeypatch: pytest.MonkeyPatch, *tops: str, cloud: str = "") -> None:
    """The top-level packages `tops` are not installed, for one test (nor loaded, and the cloud's package with
    them, so that it is imported again)."""
    own = f"goldenenv.clouds.{cloud}" if cloud else None
    for loaded in [m for m in sys.modules if m.split(".")[0] in tops or own and (m == own or m.startswith(own + "."))]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setattr(sys, "meta_path", [Refuse(*tops), *sys.meta_path])


@pytest.fixture
def cloud_folder(tmp_path, monkeypatch):
    """Makes goldenenv/clouds/<name>/ importing `module`, found beside the shipped clouds, with `module`'s top-level
    package refused; returns a function (name, module) -> None."""
    folder = tmp_path / "clouds"
    folder.mkdir()
    monkeypatch.setattr(clouds, "__path__", [*clouds.__path__, str(folder)])

    def make(name: str, module: str) -> None:
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(f"import {module}\n", encoding="utf-8")
        refuse(monkeypatch, module.split(".")[0])

    return make


def said(cloud: str) -> str:
    with pytest.raises(ProviderMissing) as caught:
        clouds.load(cloud)
    return str(caught.value)


@pytest.mark.parametrize(("cloud", "module", "extra"), [
    ("acmecloud", "pulumi_alicloud.ecs", "alicloud"),
    # boto3 is no Pulumi provider, but AWS's extra installs it: a copy of AWS's folder missing it is told so
    ("acmeaws", "boto3", "aws"),
])
def test_a_cloud_on_another_clouds_provider_or_sdk_is_told_that_clouds_extra(metadata, cloud_folder, cloud, module,
                                                                              extra):
    cloud_folder(cloud, module)
    assert said(cloud) == (f"goldenenv:cloud: {cloud} needs its provider: ./scripts/setup.sh --cloud {extra} "
                           f"(or pip install 'goldenenv[{extra}]')")


def test_a_cloud_with_its_own_extra_is_told_its_own(metadata, monkeypatch):
    refuse(monkeypatch, "pulumi_aws", "boto3", cloud="aws")
    assert said("aws").endswith("./scripts/setup.sh --cloud aws (or pip install 'goldenenv[aws]')")


def test_a_provider_no_extra_holds_is_named_by_its_own_pip_install(metadata, cloud_folder):
    cloud_folder("acmecloud", "pulumi_acme")
    assert said("acmecloud") == ("goldenenv:cloud: acmecloud needs its provider: pip install pulumi-acme (no extra "
                                 "of goldenenv installs it)")


def test_a_missing_module_no_extra_installs_is_a_fault_not_a_missing_provider(metadata, cloud_folder):
    cloud_folder("acmecloud", "yaml_helpers_of_acme")
    with pytest.raises(ModuleNotFoundError):
        clouds.load("acmecloud")


def test_the_extras_are_read_from_the_metadata_and_goldenenvs_own_extras_name_no_module(metadata):
    assert extras.extras() == {"aws": {"pulumi_aws", "boto3"}, "alicloud": {"pulumi_alicloud"}, "all": set(),
                               "test": {"moto"}}
    assert not extras.is_provider(ModuleNotFoundError(name="goldenenv.clouds.nothing"), "aws"), (
        "a module of goldenenv missing is a fault, though `all` names goldenenv[...]")

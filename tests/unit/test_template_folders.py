"""A cloud's templates live in its folder, a fabric's and an accelerator family's in their own:
goldenenv/clouds/<cloud>/templates/, goldenenv/fabrics/<fabric>/templates/ and
goldenenv/accelerators/<family>/templates/, found by listing those folders; the top-level templates/ holds only the ones
shared by several clouds or fabrics, or by the code every cloud runs. A template belongs to one cloud or fabric when
its file name names it (munge-key-aws.sh.j2, layer-efa.j2), when only that one declares it (a fabric's image layer,
boot check and sidecar units; a cloud's registry login), or when only that one's code or templates use it by name
(fsx-mount.sh). Held to every template shipped and every cloud and fabric of the registries, the day one is added.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import re
from pathlib import Path

import jinja2
import pytest

from goldenenv import accelerators, clouds, fabrics, nodeboot, project, render
from goldenenv.clouds import recipe

PACKAGE = project.PACKAGE
SHARED = "shared"
"""The owner of code outside every cloud's and fabric's folder, and of templates that belong to no one of them."""


def owner_folder(owner: tuple[str, str]) -> Path:
    kind, name = owner
    return PACKAGE / kind / name / "templates"


def owners() -> list[tuple[str, str]]:
    return [("clouds", c) for c in clouds.names()] + [("fabrics", f) for f in fabrics.FABRICS] + [
        ("accelerators", a) for a in accelerators.ACCELERATORS]


@functools.cache
def shipped() -> dict[str, Path]:
    """Every template goldenenv ships, by its name under a templates/ folder, with the folder holding it."""
    found: dict[str, Path] = {}
    for folder in project.shipped_template_folders():
        for path in sorted(folder.rglob("*.j2")):
            found[path.relative_to(folder).as_posix()] = folder
    return found


def owner_of_path(path: Path) -> tuple[str, str] | str:
    """The cloud or fabric whose folder holds `path`, else SHARED."""
    parts = path.resolve().relative_to(PACKAGE).parts if path.resolve().is_relative_to(PACKAGE) else ()
    if len(parts) > 2 and (parts[0], parts[1]) in owners():
        return parts[0], parts[1]
    return SHARED


def literals(path: Path) -> set[str]:
    """The strings a module uses as values: every string constant but docstrings (a mention is no use)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose}


INCLUDE = re.compile(r"""{%-?\s*(?:include|import|extends|from)\s+["']([^"']+)["']""")


@functools.cache
def users() -> dict[str, set]:
    """Who uses each shipped template by name: the modules of goldenenv (its name, its file name or that without
    .j2, as a string value) and the templates that include it, each counted as its folder's owner."""
    spelled = {form: name for name in shipped()
               for form in (name, name.rsplit("/", 1)[-1], name.removesuffix(".j2").rsplit("/", 1)[-1])}
    found: dict[str, set] = {name: set() for name in shipped()}
    for module in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" not in module.parts:
            for text in literals(module) & set(spelled):
                found[spelled[text]].add(owner_of_path(module))
    for name, folder in shipped().items():
        for included in INCLUDE.findall((folder / name).read_text(encoding="utf-8")):
            if included in found:
                found[included].add(owner_of_path(folder / name))
    return found


def parts_classes(cloud: str) -> list[type]:
    """The recipe parts a cloud's parts.py defines (none for a cloud without one, as the local cloud)."""
    if importlib.util.find_spec(f"goldenenv.clouds.{cloud}.parts") is None:
        return []
    module = importlib.import_module(f"goldenenv.clouds.{cloud}.parts")
    return [value for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, recipe.Parts) and value is not recipe.Parts]


@functools.cache
def declared() -> dict[str, set]:
    """The templates each cloud, fabric or accelerator family declares by its record rather than by a name in its
    code: a fabric's image layer, boot check (unit and script) and sidecar units, a cloud's registry login, a
    family's image layer."""
    found: dict[str, set] = {}
    for name, fabric in fabrics.FABRICS.items():
        names = [fabric.image_layer, *(f"node/{unit}.j2" for unit in fabric.boot_check or ()),
                 *(f"node/{nodeboot.sidecar_unit_name(s)}.j2" for s in fabric.sidecars)]
        for template in names:
            found.setdefault(template, set()).add(("fabrics", name))
    for name, family in accelerators.ACCELERATORS.items():
        if family.image_layer:
            found.setdefault(family.image_layer, set()).add(("accelerators", name))
    for cloud in clouds.names():
        for parts in parts_classes(cloud):
            if parts.registry_login:
                found.setdefault(f"node/registry-login-{parts.registry_login}.sh.j2", set()).add(("clouds", cloud))
    return found


def named(template: str) -> set:
    """The clouds and fabrics the template's file name names, as a word of it (munge-key-aws.sh.j2: aws)."""
    words = set(re.split(r"[-_.]", template.rsplit("/", 1)[-1]))
    return {owner for owner in owners() if owner[1] in words}


def belongs_to(template: str) -> set:
    """Where the template must live: the owners its name names; else the one owner that declares or uses it; else
    shared."""
    if named(template):
        return named(template)
    claims = declared().get(template, set()) | users()[template]
    return claims if len(claims) == 1 and SHARED not in claims else {SHARED}


@pytest.mark.parametrize("template", sorted(shipped()))
def test_every_template_lives_in_the_folder_of_the_cloud_or_fabric_it_belongs_to(template):
    where = shipped()[template]
    expected = {render.TEMPLATES if owner == SHARED else owner_folder(owner) for owner in belongs_to(template)}
    assert where in expected, (
        f"{template} is in {where.relative_to(PACKAGE.parent)}; it belongs in "
        f"{' or '.join(sorted(str(e.relative_to(PACKAGE.parent)) for e in expected))} "
        f"(its name names {shown(named(template))}; declared by {shown(declared().get(template, set()))}; used by "
        f"{shown(users()[template])})")


def shown(claims: set) -> str:
    return ", ".join(sorted(c if c == SHARED else "/".join(c) for c in claims)) or "none"


@pytest.mark.parametrize("template", sorted({t for t in declared()} | {"image/Dockerfile.j2", "node/fsx-mount.sh.j2"}))
def test_every_template_a_cloud_fabric_or_shared_code_asks_for_is_shipped_and_renders_from_one_folder(template):
    assert template in shipped(), f"{template} is declared by {declared().get(template)} but no folder holds it"
    assert render.source(template) == shipped()[template] / template


def test_the_rule_knows_the_templates_it_is_about():
    """Anchors, so a rule that judged nothing would fail: the AWS FSx mount is AWS's (used by AWS's code only),
    the ECR login is AWS's (declared by its parts), the eRDMA check is eRDMA's, the golden container is shared."""
    assert belongs_to("node/fsx-mount.sh.j2") == {("clouds", "aws")}
    assert belongs_to("node/registry-login-ecr.sh.j2") == {("clouds", "aws")}
    assert belongs_to("node/erdma-check.sh.j2") == {("fabrics", "erdma")}
    assert belongs_to("node/goldenenv-rxdm.service.j2") == {("fabrics", "tcpxo")}
    assert belongs_to("node/golden-image.sh.j2") == {SHARED}
    assert belongs_to("image/layer-ascend.j2") == {("accelerators", "ascend")}
    assert belongs_to("node/fabric-host.sh.j2") == {SHARED}, "two fabrics' checks include it: it is shared"
    assert shipped()["node/fsx-mount.sh.j2"] == PACKAGE / "clouds" / "aws" / "templates"


def test_every_folder_holding_templates_is_a_cloud_or_fabric_of_the_registry():
    folders = set(project.owned_template_folders())
    assert folders <= {owner_folder(owner) for owner in owners()}
    assert PACKAGE / "clouds" / "gcp" / "templates" in folders and PACKAGE / "fabrics" / "ib" / "templates" in folders


def scratch_package(root: Path) -> Path:
    """A package tree like goldenenv's with a new cloud and a new fabric, each with one template of its own, and a
    folder that is no package (no __init__.py), whose templates are not goldenenv's."""
    package = root / "goldenenv"
    for owner, template, text in [("clouds/scratch", "node/scratch-hello.sh.j2", "echo hello {{ who | sh }}\n"),
                                  ("fabrics/scratchnet", "image/layer-scratchnet.j2", "RUN true {{ who }}\n")]:
        (package / owner / "templates" / template).parent.mkdir(parents=True)
        (package / owner / "__init__.py").write_text("")
        (package / owner / "templates" / template).write_text(text)
    (package / "clouds" / "notapackage" / "templates").mkdir(parents=True)
    return package


def test_a_new_cloud_or_fabric_folder_brings_its_templates_with_no_list_edited(tmp_path, monkeypatch):
    package = scratch_package(tmp_path)
    found = project.owned_template_folders(package)
    assert found == (package / "clouds" / "scratch" / "templates", package / "fabrics" / "scratchnet" / "templates")
    real = project.owned_template_folders()
    monkeypatch.setattr(project, "owned_template_folders", lambda: (*real, *found))
    assert render.render("node/scratch-hello.sh.j2", who="the new cloud") == "echo hello 'the new cloud'\n"
    assert render.render("image/layer-scratchnet.j2", who="x") == "RUN true x\n"
    assert render.render("node/enable-units.sh.j2", units=["a.service"]).startswith("#!"), "shared ones still render"


def test_two_folders_holding_one_template_name_are_refused_naming_both(tmp_path, monkeypatch):
    package = scratch_package(tmp_path)
    twin = package / "fabrics" / "scratchnet" / "templates" / "node" / "fsx-mount.sh.j2"
    twin.parent.mkdir(parents=True)
    twin.write_text("mount something else\n")
    found = project.owned_template_folders(package)
    real = project.owned_template_folders()
    monkeypatch.setattr(project, "owned_template_folders", lambda: (*real, *found))
    with pytest.raises(render.TemplateClash) as refused:
        render.render("node/enable-units.sh.j2", units=["a.service"])
    message = str(refused.value)
    assert "node/fsx-mount.sh.j2" in message and "goldenenv/clouds/aws/templates" in message
    assert str(package / "fabrics" / "scratchnet" / "templates") in message


def test_the_shipped_folders_hold_no_name_twice():
    render.refuse_clashes(project.shipped_template_folders())


def test_a_project_template_overrides_a_clouds_own(tmp_path, monkeypatch):
    """A user's templates/node/fsx-mount.sh.j2 wins over AWS's, as it does over a shared one: no clash."""
    root = tmp_path / "infra"
    (root / "templates" / "node").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text("name: infra\nruntime: python\n")
    (root / "templates" / "node" / "fsx-mount.sh.j2").write_text("OWN {{ mount_point | sh }}\n")
    monkeypatch.setattr(project, "_current", project.load(root))
    assert render.render("node/fsx-mount.sh.j2", mount_point="/fsx") == "OWN /fsx\n"
    assert render.source("node/munge-key-aws.sh.j2") == PACKAGE / "clouds/aws/templates/node/munge-key-aws.sh.j2"


def test_a_template_no_folder_holds_is_not_found():
    with pytest.raises(jinja2.TemplateNotFound):
        render.source("node/no-such-template.sh.j2")

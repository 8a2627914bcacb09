"""The project: the user's folder, found the way the Pulumi CLI finds it.

The project is the nearest folder upward from the working directory (or `goldenenv --cwd DIR`) holding
`Pulumi.yaml`. Its stack files (Pulumi.yaml's `stackConfigDir`), `images/`, `templates/` and `examples/` are the
user's; a lock, template or example the project lacks comes from the copy packaged with goldenenv. Stacks have no
fallback: they are always the user's. This repository is itself a project, so its own folders are found first.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

PROJECT_FILE = "Pulumi.yaml"
PACKAGE = Path(__file__).resolve().parent
BUILT_DATA = PACKAGE / "_data"
"""Where a wheel carries templates/, images/, examples/ and stacks/ (copied there at build time, see setup.py)."""
SOURCE = PACKAGE.parent
"""A source checkout (editable install): the same folders at its top."""
SCAFFOLD = PACKAGE / "scaffold"
"""What `goldenenv init` writes besides the packaged stacks, lock and example."""


class NoProject(LookupError):
    """No Pulumi.yaml here or above; the message says how to start a project."""


def packaged(folder: str) -> Path:
    """The copy of `folder` (templates, images, examples, stacks) shipped with goldenenv: the wheel's, else the
    source checkout's."""
    built = BUILT_DATA / folder
    return built if built.is_dir() else SOURCE / folder


@dataclass(frozen=True)
class Project:
    root: Path
    name: str
    stacks: Path
    """Pulumi.yaml's stackConfigDir (the project folder when unset, as in Pulumi)."""

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def templates(self) -> Path:
        return self.root / "templates"

    @property
    def examples(self) -> Path:
        return self.root / "examples"

    @property
    def state(self) -> Path:
        """The local Pulumi backend goldenenv uses when PULUMI_BACKEND_URL names none."""
        return self.root / ".goldenenv" / "pulumi-state"

    @property
    def local_state(self) -> Path:
        """The local cloud's outputs (hostfile, launch env) per stack."""
        return self.root / ".goldenenv" / "local"

    def image_folders(self) -> list[Path]:
        """Where locks are looked up: the project's images/ first, then the packaged ones."""
        return _distinct(self.images, packaged("images"))

    def template_folders(self) -> list[Path]:
        """Where templates are looked up, first match wins: the project's templates/ (so a user's copy overrides
        any template), then the ones goldenenv ships (shipped_template_folders)."""
        return [*_distinct(self.templates, packaged("templates")), *owned_template_folders()]

    def examples_folder(self) -> Path:
        """The project's examples/ when it has one, else the packaged examples."""
        return self.examples if self.examples.is_dir() else packaged("examples")


TEMPLATE_OWNERS = ("clouds", "fabrics", "accelerators")
"""The folders under goldenenv/ whose packages (a cloud, a fabric, an accelerator family) may hold templates of their
own in templates/."""


def shipped_template_folders() -> list[Path]:
    """The templates goldenenv ships: the packaged templates/ (the ones every cloud and fabric shares), then each
    cloud's and fabric's own (owned_template_folders)."""
    return [packaged("templates"), *owned_template_folders()]


@functools.cache
def owned_template_folders(package: Path = PACKAGE) -> tuple[Path, ...]:
    """Each cloud's goldenenv/clouds/<cloud>/templates/, then each fabric's goldenenv/fabrics/<fabric>/templates/,
    then each accelerator family's goldenenv/accelerators/<family>/templates/, in name order. Found by listing the folders, as the catalog finds their rows, so that a new cloud or fabric
    brings its templates with no list to edit and rendering a template imports no cloud; listed once per process
    (every template of a plan is looked up through it)."""
    return tuple(entry / "templates" for owner in TEMPLATE_OWNERS if (package / owner).is_dir()
                 for entry in sorted((package / owner).iterdir(), key=lambda e: e.name)
                 if (entry / "__init__.py").is_file() and (entry / "templates").is_dir())


def _distinct(*folders: Path) -> list[Path]:
    seen: list[Path] = []
    for folder in folders:
        if folder.resolve() not in [s.resolve() for s in seen]:
            seen.append(folder)
    return seen


@functools.cache
def load(root: Path) -> Project:
    """The project whose Pulumi.yaml is in `root`."""
    from goldenenv.userfile import read_yaml

    doc = read_yaml(root / PROJECT_FILE, PROJECT_FILE, "project file")
    doc = doc if isinstance(doc, dict) else {}
    stacks = doc.get("stackConfigDir")
    return Project(root=root, name=str(doc.get("name") or root.name),
                   stacks=(root / stacks).resolve() if isinstance(stacks, str) and stacks else root)


def find(cwd: Path | str | None = None) -> Project:
    """The nearest folder upward from `cwd` (the working directory by default) holding Pulumi.yaml."""
    start = Path(cwd or Path.cwd()).expanduser().resolve()
    for folder in (start, *start.parents):
        if (folder / PROJECT_FILE).is_file():
            return load(folder)
    raise NoProject(f"no {PROJECT_FILE} here or above {start}: run `goldenenv init DIR` to start a project, "
                    "or pass --cwd")


_current: Project | None = None


def use(project: Project | None) -> None:
    """Make `project` the one every path lookup uses (the CLI does, from --cwd); None: find it from the working
    directory at each lookup."""
    global _current
    _current = project


def current() -> Project:
    """The project set by use(), else the one found from the working directory (NoProject outside one)."""
    return _current or find()


def project_name(folder: Path) -> str:
    """A Pulumi project name from a folder's name (letters, digits, `_.-`)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.resolve().name).strip("-.")
    return name[:100] or "goldenenv-project"


SCAFFOLD_STACKS = ("local", "aws-g5-dev", "alicloud-gn7i-dev")
"""The stacks a new project starts with: the local one (no cloud account) and an AWS and an Alibaba example."""
SCAFFOLD_LOCK = "cpu-dev"


class NotEmpty(FileExistsError):
    """init's target holds files already."""


def init(target: Path) -> list[Path]:
    """Write a new project in `target` (missing or empty): Pulumi.yaml, the program entry point, stacks/ (local, an
    AWS and an Alibaba example), the cpu-dev lock, examples/ and .gitignore. Returns the files written."""
    import shutil
    import string

    target = Path(target).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise NotEmpty(f"{target} exists and is not an empty folder: init writes a new project into a new or empty folder")
    name = project_name(target)
    pulumi_yaml = string.Template((SCAFFOLD / PROJECT_FILE).read_text(encoding="utf-8")).substitute(name=name)
    files = {
        Path(PROJECT_FILE): pulumi_yaml,
        Path("program") / "__main__.py": (SCAFFOLD / "program" / "__main__.py").read_text(encoding="utf-8"),
        Path(".gitignore"): (SCAFFOLD / "gitignore").read_text(encoding="utf-8"),
    }
    copies = {Path("stacks") / f"Pulumi.{s}.yaml": packaged("stacks") / f"Pulumi.{s}.yaml" for s in SCAFFOLD_STACKS}
    copies[Path("images") / SCAFFOLD_LOCK / "lock.yaml"] = packaged("images") / SCAFFOLD_LOCK / "lock.yaml"
    examples = packaged("examples")
    copies.update({Path("examples") / p.relative_to(examples): p for p in sorted(examples.rglob("*"))
                   if p.is_file() and "__pycache__" not in p.parts})
    written = []
    for relative, text in files.items():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        (target / relative).write_text(text, encoding="utf-8")
        written.append(target / relative)
    for relative, source in copies.items():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target / relative)
        written.append(target / relative)
    return written

"""The project folders ship inside the wheel: templates/, the image locks, examples/ and the example stacks are
copied to goldenenv/_data at build time (goldenenv.project.packaged finds them there, or here in a checkout).
templates/ holds the shared templates only: a cloud's or fabric's own are in its package folder
(goldenenv/clouds/<cloud>/templates/, goldenenv/fabrics/<fabric>/templates/) and ship as its package data
(pyproject.toml)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = {"templates": ("**/*",), "images": ("*/lock.yaml", "hosts/*.yaml"), "examples": ("**/*",),
           "stacks": ("Pulumi.*.yaml",)}
"""Each folder's files that ship, by glob: the image locks and the host locks (images/hosts/) the cloud stacks name;
never a record of what this machine published (published.yaml, <host>.published.yaml)."""


class BuildWithProjectData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's own folders
        data = Path(self.build_lib) / "goldenenv" / "_data"
        for folder, patterns in SHIPPED.items():
            for source in sorted(p for pattern in patterns for p in Path(folder).glob(pattern)):
                if not source.is_file() or "__pycache__" in source.parts or source.name.endswith("published.yaml"):
                    continue
                target = data / source
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


setup(cmdclass={"build_py": BuildWithProjectData})

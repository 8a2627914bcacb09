"""The project folders ship inside the wheel: templates/, the image locks, examples/ and the example stacks are
copied to goldenenv/_data at build time (goldenenv.project.packaged finds them there, or here in a checkout)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = {"templates": "**/*", "images": "*/lock.yaml", "examples": "**/*", "stacks": "Pulumi.*.yaml"}


class BuildWithProjectData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's own folders
        data = Path(self.build_lib) / "goldenenv" / "_data"
        for folder, pattern in SHIPPED.items():
            for source in sorted(Path(folder).glob(pattern)):
                if not source.is_file() or "__pycache__" in source.parts:
                    continue
                target = data / source
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


setup(cmdclass={"build_py": BuildWithProjectData})

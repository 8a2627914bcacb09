"""A stand-in for the part of a Pulumi Automation API stack that `destroy` uses (its outputs, its destroy), shared by
the tests of what destroy does before it removes anything."""

from __future__ import annotations

from types import SimpleNamespace


class FakeStack:
    """The part of an Automation API stack destroy uses: the outputs it reads, and a destroy it records."""

    def __init__(self, outputs: dict):
        self._outputs = outputs
        self.calls: list[str] = []
        self.workspace = SimpleNamespace(env_vars={})

    def outputs(self):
        return {k: type("Out", (), {"value": v})() for k, v in self._outputs.items()}

    def destroy(self, on_output=None, run_program=None):
        self.calls.append("destroy")

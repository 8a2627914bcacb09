"""A variable of an Automation API workspace, set for the commands run inside a block and then put back.

Below automation.py and updates.py, which both use it: updates.py (rolling nodes) runs its own `up`s with the
nodes to roll in the workspace's environment, and automation.py imports updates.py, so this cannot live in
automation.py without an import circle.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager


@contextmanager
def scoped_env(env: MutableMapping[str, str], name: str, value: str) -> Iterator[None]:
    """Set a variable of an Automation API workspace for the commands run inside, then put back what was there."""
    had, previous = name in env, env.get(name)
    env[name] = value
    try:
        yield
    finally:
        if had:
            env[name] = previous
        else:
            env.pop(name, None)

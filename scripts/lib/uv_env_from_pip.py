"""Carry this machine's pip settings over to uv, which reads UV_* variables and never pip's files or PIP_* variables.

Reads `pip config list` (pip's own merged view of its environment variables and config files) on stdin and prints
`export NAME=VALUE` lines for bash: where to find packages (index, extra indexes, local wheel folders), which
certificates to trust, the hosts trusted without TLS and the constraint files. A variable already set for uv is kept,
so a user's own uv settings win. With extra indexes uv is told to pick the best version across all of them, as pip
does (uv otherwise stops at the first index that knows a package's name, and a pinned version missing from a local
mirror would fail).
"""

import ast
import os
import shlex
import sys

# pip's option -> the uv variable that means the same, and the separator uv expects between several values.
# Sources: https://pip.pypa.io/en/stable/topics/configuration/ and https://docs.astral.sh/uv/reference/environment/
UV_NAME = {
    "index-url": ("UV_INDEX_URL", " "),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "cert": ("SSL_CERT_FILE", " "),
    "trusted-host": ("UV_INSECURE_HOST", " "),
    "constraint": ("UV_CONSTRAINT", " "),
}
# pip's precedence for `pip install`: its environment variables, then the [install] section, then [global]
SECTION_RANK = {":env:": 3, "install": 2, "global": 1}


def pip_settings(config_list: str) -> dict[str, list[str]]:
    """The values of the options uv needs, from the highest-ranked section that sets each."""
    best: dict[str, tuple[int, list[str]]] = {}
    for line in config_list.splitlines():
        key, sep, raw = line.partition("=")
        section, _, option = key.rpartition(".")
        if not sep or option not in UV_NAME or section not in SECTION_RANK:
            continue
        rank = SECTION_RANK[section]
        if option not in best or rank > best[option][0]:
            best[option] = (rank, ast.literal_eval(raw).split())
    return {option: values for option, (_, values) in best.items()}


def uv_environment(config_list: str, environ: dict[str, str]) -> dict[str, str]:
    """The variables to set for uv; none that `environ` already sets."""
    wanted = {}
    for option, values in pip_settings(config_list).items():
        name, separator = UV_NAME[option]
        wanted[name] = separator.join(values)
    if "UV_EXTRA_INDEX_URL" in wanted:
        wanted["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return {name: value for name, value in wanted.items() if value and name not in environ}


def main() -> None:
    for name, value in sorted(uv_environment(sys.stdin.read(), dict(os.environ)).items()):
        print(f"export {name}={shlex.quote(value)}")


if __name__ == "__main__":
    main()

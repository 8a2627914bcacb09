"""setup.sh's choice of goldenenv's extras: its options checked against pyproject.toml, as shell assignments to eval.

    python3 scripts/lib/extras.py [--test] [--cloud aws,gcp]... [--had "aws gcp"]

prints, for `eval`:
    extras='aws,gcp'              what to install: pip install -e '.[aws,gcp]' (empty: goldenenv alone)
    covers='aws gcp'              every extra that install holds (test holds all clouds): setup.sh's stamp keeps it
    providers='pulumi-aws, ...'   the cloud providers it installs, for the line that says what comes
    disk_mb=410                   about how many megabytes the virtualenv takes with them

--had: the extras a set-up of this virtualenv installed before (its stamp): they are installed again with the new
ones, so a rerun after pyproject.toml changed keeps the clouds chosen then, at their new pins.
A cloud is an extra of pyproject.toml other than test and all (each names a folder of goldenenv/clouds/). A wrong
option or cloud is said with what is valid, on stderr, exit 2.
"""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
NOT_CLOUDS = ("test", "all")
"""Extras that are not one cloud's provider: the test suite's dependencies (with every cloud), and every cloud."""
DISK_MB = {"": 250, "test": 40, "pulumi-aws": 120, "boto3": 30, "pulumi-alicloud": 70, "pulumi-gcp": 135,
           "pulumi-azure-native": 155, "tencentcloud-iac-pulumi": 66, "tencentcloud-sdk-python-common": 1,
           "tencentcloud-sdk-python-cfs": 1, "cos-python-sdk-v5": 13, "pulumi-huaweicloud": 22,
           "huaweicloudsdkcore": 7, "huaweicloudsdksfsturbo": 2, "huaweicloudsdkbss": 4, "huaweicloudsdkecs": 4,
           "huaweicloudsdkmodelarts": 14, "setuptools": 5}
"""Megabytes on disk as uv installs them (not byte-compiled), measured with du in a fresh .venv (scripts/bench_setup.py,
December 2026): goldenenv's own dependencies (""), the test extra's, and each cloud's provider; boto3 (with botocore,
s3transfer and jmespath: 32 MB by du) left the main install for the aws extra, so it moved from "" to its own entry;
Tencent's provider by du without __pycache__ in a pip-installed .venv (66 MB; 146 MB byte-compiled); Tencent's COS SDK
the same way with what it adds to the tencent extra (qcloud_cos 0.7 MB, pycryptodome 12 MB, crcmod 0.1 MB); Huawei's the same way (du -k without __pycache__ in this branch's .venv, 2026-12-07):
pulumi_huaweicloud 21.6 MB, huaweicloudsdkcore 7.4 MB with what it adds (pymongo + bson + gridfs 4.1, dnspython 1.5,
simplejson 0.8, pyasn1 0.5, requests-toolbelt 0.2, defusedxml 0.1), the ModelArts SDK 13.6 MB, BSS 4.2, ECS 4.0,
SFS Turbo 1.5, and setuptools (the huawei extra caps it below 81) 5.2."""
SELF = re.compile(r"^goldenenv\[(?P<extras>[^\]]+)\]$")
"""An extra that names others of goldenenv's own (all = goldenenv[aws,gcp,...])."""


def covered(name: str, extras: dict[str, list[str]]) -> set[str]:
    """The extra and every extra it names, however deep (test -> all -> aws, gcp, ...)."""
    found, todo = set(), [name]
    while todo:
        extra = todo.pop()
        if extra in found:
            continue
        found.add(extra)
        for requirement in extras.get(extra, []):
            if match := SELF.match(requirement.replace(" ", "")):
                todo.extend(match["extras"].split(","))
    return found


def providers(names: set[str], extras: dict[str, list[str]]) -> list[str]:
    """The distributions the clouds among those extras install (pulumi-aws, ...), in pyproject.toml's order."""
    return [re.split(r"[=<>!~;\s\[]", r, maxsplit=1)[0] for extra, requirements in extras.items()
            if extra in names and extra not in NOT_CLOUDS for r in requirements if not SELF.match(r.replace(" ", ""))]


def usage(message: str, clouds: list[str]) -> None:
    print(f"setup.sh: {message}; valid: --test (the test suite's dependencies and every cloud), --cloud CLOUD[,CLOUD] "
          f"(each one of {', '.join(clouds)}, or all), or nothing (the local flow: no cloud provider)", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str]) -> int:
    extras: dict[str, list[str]] = tomllib.loads(PYPROJECT.read_text())["project"].get("optional-dependencies", {})
    clouds = [name for name in extras if name not in NOT_CLOUDS]
    asked: list[str] = []
    args = list(argv)
    while args:
        option = args.pop(0)
        name, _, value = option.partition("=")
        if name in ("--cloud", "--had") and not value:
            if not args or (name == "--cloud" and args[0].startswith("-")):
                usage(f"{name} needs a value", clouds)
            value = args.pop(0)
        if option == "--test":
            asked.append("test")
        elif name == "--cloud":
            for cloud in filter(None, (c.strip() for c in value.split(","))):
                if cloud not in clouds and cloud != "all":
                    usage(f"'{cloud}' is not a cloud goldenenv installs a provider for", clouds)
                asked.append(cloud)
        elif name == "--had":
            asked.extend(e for e in value.split() if e in extras)  # an extra pyproject.toml no longer has is dropped
        else:
            usage(f"unknown option '{option}'", clouds)
    chosen = sorted(set(asked), key=lambda e: list(extras).index(e))
    holds = set().union(*(covered(e, extras) for e in chosen)) if chosen else set()
    # an extra another chosen one already holds is left out of the install's name: .[test], not .[test,aws]
    needed = [e for e in chosen if not any(e in covered(o, extras) for o in chosen if o != e)]
    print(f"extras={shlex.quote(','.join(needed))}")
    print(f"covers={shlex.quote(' '.join(sorted(holds)))}")
    print(f"providers={shlex.quote(', '.join(providers(holds, extras)))}")
    disk = DISK_MB[""] + sum(DISK_MB.get(p, 0) for p in providers(holds, extras)) + DISK_MB["test"] * ("test" in holds)
    print(f"disk_mb={round(disk, -1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

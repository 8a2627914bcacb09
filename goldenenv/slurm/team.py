#!/usr/bin/env python3
"""goldenenv-team: the team's members on every host of the cluster, from one file on the shared file system.

Shipped into the golden image as /usr/local/bin/goldenenv-team (standard library only) and started by goldenenv-slurm
in every golden container: `goldenenv-team watch --role head|node --file <jobs>/.goldenenv/team.tsv`. Whenever the
file changes (`goldenenv team add|set|remove`, or `up`), each container makes every member a Unix user with the uid
the stack file gives (so files on the shared file system belong to the same person everywhere) and a home on the
shared file system holding their ssh key; the head also keeps Slurm's associations in step: account `team`, each
member's fair share and GPU-minute limit (GrpTRESMins), the stack's monthly budget as the account's limit. Running
jobs are never touched. The head writes `<file>.applied` (the file's SHA-256, ok or error, what it did) for
`goldenenv team` to read.

The file, one record a line, tab-separated (goldenenv/team.py writes it):
    member  NAME  UID  SHARE  GPU_MINUTES|-  SSH_PUBLIC_KEY
    cluster GPU_MINUTES|-  TRES
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pwd
import re
import subprocess
import sys
import time
from dataclasses import dataclass

ACCOUNT = "team"
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
POLL_S = 3
RETRY_S = 15


@dataclass(frozen=True)
class Member:
    name: str
    uid: int
    share: int
    gpu_minutes: int | None
    key: str


@dataclass(frozen=True)
class Team:
    members: list[Member]
    cluster_minutes: int | None
    tres: str


def log(message: str) -> None:
    print(f"goldenenv-team: {message}", file=sys.stderr, flush=True)


def parse(text: str) -> Team:
    """The team file; a line that is not a record of the format is an error naming its number."""
    members, cluster_minutes, tres = [], None, "gres/gpu"
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        try:
            if fields[0] == "member" and len(fields) == 6 and NAME.match(fields[1]):
                members.append(Member(fields[1], int(fields[2]), int(fields[3]), _minutes(fields[4]), fields[5]))
            elif fields[0] == "cluster" and len(fields) == 3 and re.match(r"^gres/[a-z]+$", fields[2]):
                cluster_minutes, tres = _minutes(fields[1]), fields[2]
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"line {number} is not a team record") from None
    return Team(members, cluster_minutes, tres)


def _minutes(field: str) -> int | None:
    return None if field == "-" else int(field)


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def apply_users(team: Team, home_root: str, head: bool) -> list[str]:
    """Each member a Unix user with their uid; on the head (the shared file system's one writer) their home there,
    with their key. A name taken by another uid is an error for that member only."""
    problems = []
    for member in team.members:
        home = os.path.join(home_root, member.name)
        try:
            found = pwd.getpwnam(member.name)
        except KeyError:
            found = None
        if found is None:
            taken = _uid_owner(member.uid)
            if taken:
                problems.append(f"{member.name}: uid {member.uid} is {taken}'s on this host")
                continue
            done = run(["useradd", "--uid", str(member.uid), "--no-create-home", "--home-dir", home,
                        "--shell", "/bin/bash", "--user-group", member.name])
            if done.returncode:
                problems.append(f"{member.name}: useradd failed: {done.stderr.strip()}")
                continue
        elif found.pw_uid != member.uid:
            problems.append(f"{member.name}: already uid {found.pw_uid} on this host, the team says {member.uid}")
            continue
        if head:
            _home(home, member)
    return problems


def _uid_owner(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _home(home: str, member: Member) -> None:
    """The member's home on the shared file system with their public key as their login key (0700/0600)."""
    ssh = os.path.join(home, ".ssh")
    os.makedirs(ssh, exist_ok=True)
    keys = os.path.join(ssh, "authorized_keys")
    with open(keys, "w") as f:
        f.write(member.key + "\n")
    for path, mode in ((home, 0o700), (ssh, 0o700), (keys, 0o600)):
        os.chown(path, member.uid, member.uid)
        os.chmod(path, mode)


def sacctmgr(*words: str) -> str:
    done = run(["sacctmgr", "--immediate", "--noheader", "--parsable2", *words])
    if done.returncode:
        raise RuntimeError(f"sacctmgr {' '.join(words)}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def cluster_name() -> str:
    with open("/etc/slurm/slurm.conf") as f:
        for line in f:
            if line.startswith("ClusterName="):
                return line.split("=", 1)[1].strip()
    raise RuntimeError("slurm.conf names no ClusterName")


def apply_accounts(team: Team, operator: str, prune: bool = True) -> list[str]:
    """Slurm's associations as the team file says: the cluster, account `team` with the budget's GPU minutes, each
    member (and the image's own user, with no limit of its own) with their share and GPU minutes; a member no
    longer in the file loses their association (their finished jobs stay in the history)."""
    cluster = cluster_name()
    said = []
    if cluster not in sacctmgr("show", "cluster", "format=cluster").split():
        sacctmgr("add", "cluster", cluster)
        said.append(f"cluster {cluster} added")
    tres = team.tres
    if ACCOUNT not in sacctmgr("show", "account", "format=account").split():
        sacctmgr("add", "account", ACCOUNT, f"cluster={cluster}", "description=the stack's team",
                 "organization=goldenenv")
    sacctmgr("modify", "account", "where", f"name={ACCOUNT}", f"cluster={cluster}", "set",
             f"GrpTRESMins={tres}={_limit(team.cluster_minutes)}")
    wanted = {m.name: m for m in team.members}
    if operator and operator not in wanted:
        wanted[operator] = Member(operator, 1000, 1, None, "")
    rows = sacctmgr("show", "association", f"cluster={cluster}", f"account={ACCOUNT}", "format=user")
    present = {line.strip() for line in rows.splitlines() if line.strip()}
    for name, member in wanted.items():
        if name not in present:
            sacctmgr("add", "user", name, f"account={ACCOUNT}", f"cluster={cluster}")
            said.append(f"{name} added")
        sacctmgr("modify", "user", "where", f"name={name}", f"cluster={cluster}", f"account={ACCOUNT}", "set",
                 f"fairshare={member.share}", f"GrpTRESMins={tres}={_limit(member.gpu_minutes)}")
    for name in sorted(present - set(wanted)) if prune else []:
        try:
            sacctmgr("delete", "user", "where", f"name={name}", f"cluster={cluster}", f"account={ACCOUNT}")
            said.append(f"{name} removed")
        except RuntimeError as e:  # Slurm refuses while the user has jobs: their association stays until then
            said.append(f"{name} not removed yet: {e}")
    return said


def _limit(minutes: int | None) -> int:
    return -1 if minutes is None else minutes


def apply_once(path: str, role: str, operator: str) -> tuple[str, str]:
    with open(path, "rb") as f:
        data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    team = parse(data.decode())
    home_root = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(path))), "home")
    problems = apply_users(team, home_root, head=role == "head")
    said = apply_accounts(team, operator) if role == "head" else []
    if problems:
        raise RuntimeError("; ".join(problems))
    return digest, f"{len(team.members)} member(s)" + (f": {'; '.join(said)}" if said else "")


def watch(path: str, role: str, operator: str) -> None:
    """Apply the file when it appears or changes; on the head, say the outcome in <file>.applied."""
    applied, retry_at, bare = None, 0.0, False
    while role == "head" and not _registered():
        time.sleep(1)
    while True:
        stamp = _digest(path) if os.path.exists(path) else None  # by content: a copied file may keep an old mtime
        if stamp == "-":
            stamp = None
        if stamp is None and role == "head" and not bare:
            bare = _bare(operator)
        if stamp is not None and (stamp != applied or (retry_at and time.monotonic() >= retry_at)):
            try:
                digest, message = apply_once(path, role, operator)
                outcome, retry_at = "ok", 0.0
                log(f"applied {path}: {message}")
            except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as e:
                digest = _digest(path)
                outcome, message, retry_at = "error", str(e), time.monotonic() + RETRY_S
                log(f"could not apply {path}: {message}")
            applied = stamp
            if role == "head":
                _say(path, digest, outcome, message)
        time.sleep(POLL_S)


def _registered() -> bool:
    """slurmctld has registered with slurmdbd (the cluster's ControlHost is set): only then does a change of
    associations reach it as an update; one made before may be missed until slurmctld restarts."""
    try:
        return bool(sacctmgr("show", "cluster", cluster_name(), "format=controlhost").strip())
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return False


def _bare(operator: str) -> bool:
    """No team file yet (a cloud head before `goldenenv team apply`): the image's own user gets its association, so
    jobs run, with no limit until the file brings the team's and the budget's; associations a restored history holds
    are kept. True once done."""
    try:
        said = apply_accounts(Team([], None, "gres/gpu"), operator, prune=False)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        log(f"no team file yet, and the image's user has no association: {e}")
        return False
    log(f"no team file yet: {'; '.join(said) or 'the image user is associated'}")
    return True


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return "-"


def _say(path: str, digest: str, outcome: str, message: str) -> None:
    marker = path.removesuffix(".tsv") + ".applied"
    part = marker + ".part"
    with open(part, "w") as f:
        f.write(f"{digest}\t{outcome}\t{' '.join(message.split())}\n")
    os.chmod(part, 0o644)
    os.replace(part, marker)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="goldenenv-team", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    bare = sub.add_parser("bare", help="the account and the image's user's association, before slurmctld starts")
    bare.add_argument("--operator", default="")
    for name in ("watch", "apply"):
        command = sub.add_parser(name)
        command.add_argument("--role", choices=("head", "node"), required=True)
        command.add_argument("--file", required=True)
        command.add_argument("--operator", default="")
    args = parser.parse_args(argv)
    if args.command == "bare":
        return 0 if _bare(args.operator) else 1
    if args.command == "watch":
        watch(args.file, args.role, args.operator)
        return 0
    try:
        digest, message = apply_once(args.file, args.role, args.operator)
    except (OSError, ValueError, RuntimeError) as e:
        log(str(e))
        return 1
    print(f"{digest} {message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

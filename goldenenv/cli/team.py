"""`goldenenv team ...`: the people who share a stack's cluster (list, add, remove, set, apply).

Each edit changes the stack file's `goldenenv:team` in place (ruamel.yaml round trip: comments and order kept), after
the edited file has passed the same checks every command runs on a stack file, so a bad edit leaves the file as it
was. Then, unless --no-apply, it writes the team file on the running cluster's head and waits until the head has
applied it (goldenenv.team): Unix users and Slurm's shares and limits change, running jobs go on untouched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from itertools import count
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from goldenenv.cli.common import HOSTS_BY, STACK, console, errors, fail, lifecycle_failure, say, stack_spec
from goldenenv.cli.jobs import EXEC_PREFIX, HEAD, SSH_CONFIG, SSH_USER
from goldenenv.clouds.base import HostsBy
from goldenenv.spec import STATE_KEYS, ConfigError, Problem

app = typer.Typer(name="team", no_args_is_help=True,
                  help="The team sharing a stack's cluster: each member's login, fair share and GPU-hour limit.")

NAME = typer.Argument(..., help="The member's user name, on every node and in Slurm (e.g. ana).")
KEY = typer.Option(None, "--key", help="The member's OpenSSH public key: a .pub file, or its one line.")
GPU_HOURS = typer.Option(None, "--gpu-hours", metavar="N|none", help="GPU-hours a calendar month Slurm lets the "
                         "member's jobs use (then their next job waits PENDING); none: no limit of their own.")
SHARE = typer.Option(None, "--share", help="Fair-share shares (1 to 10,000): with the queue full, members get GPU "
                     "time in proportion to these; default 1.")
NO_APPLY = typer.Option(False, "--no-apply", help="Only edit the stack file; the cluster takes it at the next up "
                        "(or goldenenv team apply).")

TEAM_KEYS = ("goldenenv:team", "team")
"""The stack file's key for the team: namespaced, or bare as Pulumi stack files may write goldenenv's keys."""
FIRST_UID = 2001
"""`team add`'s first uid when none is given: the lowest free one from here (spec.MIN_MEMBER_UID and up are taken)."""
FLAGS = {"name": "NAME", "uid": "--uid", "sshPublicKey": "--key", "gpuHours": "--gpu-hours", "share": "--share"}
"""The edited member's keys, by the flag a problem with them comes from."""


def _stack_path(stack: str) -> Path:
    from goldenenv import stackconfig
    from goldenenv.plan import stack_file

    path = stack_file(stack)
    try:
        stackconfig.read_stack_file(path)
    except ConfigError as e:
        fail(e, path)
    return path


def _yaml():
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # a key is one long line: never folded
    return yaml


def _team(config, stack: str) -> list:
    """The stack file's team list, made (at the end of config) when the file has none; a team that is no list is
    the stack file's problem, reported as every command reports it, never overwritten."""
    from ruamel.yaml.comments import CommentedSeq

    key = next((k for k in TEAM_KEYS if k in config), None)
    if key is not None and config[key] is not None and not isinstance(config[key], list):
        stack_spec(stack)
    if key is None or config[key] is None:
        key = key or TEAM_KEYS[0]
        config[key] = CommentedSeq()
    return config[key]


def _find(team: list, name: str, stack: str) -> int:
    found = next((i for i, m in enumerate(team) if isinstance(m, dict) and m.get("name") == name), None)
    if found is None:
        names = ", ".join(str(m.get("name")) for m in team if isinstance(m, dict)) or "nobody yet"
        errors.print(f"[bold red]NAME {escape(name)}[/]: not in {escape(stack)}'s team (the team: {escape(names)})",
                     soft_wrap=True)
        raise typer.Exit(2)
    return found


def _edit(stack: str, change: Callable[[list], int], reach: dict[str, object] | None = None):
    """Change the stack file's team with `change` (it returns the edited member's index), check the whole edited
    file as every command would, and the head options given (`reach`, by flag) fit the stack, and only then replace
    the file; the spec it now holds."""
    from ruamel.yaml.comments import CommentedMap

    path = _stack_path(stack)
    yaml = _yaml()
    doc = yaml.load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        doc = CommentedMap()
    edited = change(_team(doc.setdefault("config", CommentedMap()), stack))
    draft = path.with_name(f".{path.name}.team-edit")
    try:
        with draft.open("w", encoding="utf-8") as f:
            yaml.dump(doc, f)
        try:
            spec = _load_draft(stack, draft)
        except ConfigError as e:
            fail(ConfigError([_as_flag(p, edited) for p in e.problems]), path)
        _reach_fits(spec, reach or {})
        os.chmod(draft, path.stat().st_mode & 0o7777)
        os.replace(draft, path)
    finally:
        draft.unlink(missing_ok=True)
    return spec


def _reach_fits(spec, reach: dict[str, object]) -> None:
    """The cloud stacks' head options are refused on a stack whose head is a local container, before any edit."""
    from goldenenv import clouds
    from goldenenv.clouds.base import NodeReach

    given = [flag for flag, value in reach.items() if value]
    if given and clouds.get(spec.cloud).reaches_nodes_by is NodeReach.DOCKER:
        errors.print(f"{', '.join(given)}: for cloud stacks; {spec.stack}'s head is a local container")
        raise typer.Exit(2)


def _reach(head, ssh_config, ssh_user, hosts_by, exec_prefix) -> dict[str, object]:
    return {"--head": head, "--ssh-config": ssh_config, "--ssh-user": ssh_user, "--hosts-by": hosts_by,
            "--exec-prefix": exec_prefix}


def _load_draft(stack: str, draft: Path):
    from goldenenv import clouds, stackconfig

    values, unknown = stackconfig.namespaced(stackconfig.read_stack_file(draft))
    spec = stackconfig.load(stack, values, unknown)
    clouds.validate(spec)
    return spec


def _as_flag(problem: Problem, edited: int) -> Problem:
    """A problem with the edited member's field, named by the flag that gave it (`--uid`); any other as it is."""
    for prefix in (f"{key}[{edited}]." for key in TEAM_KEYS):
        field = problem.key.removeprefix(prefix) if problem.key.startswith(prefix) else None
        if field in FLAGS:
            return Problem(FLAGS[field], problem.message)
    return problem


def _key_line(given: str) -> str:
    """--key's public key: the file's line when it names a file, else the text itself (normalised where it reads as
    a key; anything else is left for the stack file's checks to refuse, never quoted)."""
    from goldenenv import sshkeys

    text = given
    try:
        candidate = Path(given).expanduser()
        is_file = candidate.is_file()
    except (OSError, ValueError):
        is_file = False
    if is_file:
        text = candidate.read_text(encoding="utf-8", errors="replace")
    elif " " not in given.strip():
        errors.print("[bold red]--key[/]: no such file, and not a public key line (never shown: it could be a "
                     "private key); give the .pub file or its one line ('ssh-ed25519 AAAA... you@laptop')",
                     soft_wrap=True)
        raise typer.Exit(2)
    try:
        return sshkeys.parse(text).line
    except sshkeys.NotAPublicKey:
        return text


def _hours(given: str | None) -> object:
    """--gpu-hours as the stack file writes it: a number, `none`, or the text (its check says what is wrong)."""
    from goldenenv.spec import NO_LIMIT

    if given is None or given.strip().lower() == NO_LIMIT:
        return None
    for kind in (int, float):
        try:
            return kind(given)
        except ValueError:
            pass
    return given


def _apply(spec, no_apply: bool, head: str | None, ssh_config: str | None, ssh_user: str | None,
           hosts_by: HostsBy | None, exec_prefix: str | None) -> None:
    """Write the team file on the running cluster's head and wait for it to be applied; a stack that is not up
    takes it at its next up."""
    from goldenenv import automation, jobs, remote, team
    from goldenenv.cli.jobs import head_client

    if no_apply:
        say(f"not applied (--no-apply): {spec.stack} takes it at the next goldenenv up, or goldenenv team apply")
        return
    try:
        try:
            client, _ = head_client(spec, head, ssh_config, ssh_user, hosts_by, exec_prefix)
        except ConfigError as e:
            if e.about != STATE_KEYS:
                fail(e)
            say(f"{spec.stack} is not up: the team applies at the next goldenenv up")
            return
        except Exception as e:  # noqa: BLE001 - no Docker engine here: nothing local is up
            if type(e).__module__.split(".")[0] != "docker":
                raise
            say(f"no Docker engine answers here, so {spec.stack} is not up: the team applies at the next goldenenv up")
            return
        message = team.apply(client, spec)
    except (jobs.HeadError, automation.LifecycleError, remote.RemoteError) as e:
        errors.print(f"the stack file is saved, but the cluster has not taken it: rerun goldenenv team apply -s "
                     f"{escape(spec.stack)} when the head can be reached", soft_wrap=True)
        lifecycle_failure(e)
    say(f"applied on {spec.stack}'s head" + (f": {message}" if message else "") + "; running jobs go on")


@app.command("list")
def list_cmd(stack: str = STACK, as_json: bool = typer.Option(False, "--json", help="One JSON list, for scripts.")
             ) -> None:
    """The stack file's team: each member's uid, fair share, monthly GPU-hour limit and key; then the cluster-wide
    limit the monthly budget sets."""
    from goldenenv.gpuprice import cluster_gpu_minutes

    spec = stack_spec(stack)
    rows = [{"name": m.name, "uid": m.uid, "share": m.share, "gpuHours": m.gpu_hours, "keyType": m.ssh_key.type,
             "keyComment": m.ssh_key.comment, "keyFingerprint": m.ssh_key.fingerprint} for m in spec.team]
    cluster = cluster_gpu_minutes(spec)
    if as_json:
        print(json.dumps({"members": rows, "clusterGpuMinutes": cluster}, indent=2))
        return
    if not rows:
        console.print(f"no team in {escape(spec.stack)}'s stack file: the image's user only (goldenenv team add "
                      "NAME --key FILE.pub)", highlight=False)
    else:
        table = Table()
        for column in ("name", "uid", "share", "GPU-hours a month", "key"):
            table.add_column(column)
        for row in rows:
            hours = "no limit" if row["gpuHours"] is None else f"{row['gpuHours']:g}"
            key = f"{row['keyType']} {row['keyComment']}".strip()
            table.add_row(escape(row["name"]), str(row["uid"]), str(row["share"]), hours, escape(key))
        console.print(table)
    console.print("cluster-wide: " + ("no limit (the stack has no budget, or its GPUs have no price in its "
                                      "currency)" if cluster is None else
                                      f"{cluster / 60:,.1f} GPU-hours a month (the monthly budget at the dearest "
                                      "pool's GPU-hour price)"), highlight=False)


@app.command("add")
def add_cmd(name: str = NAME, stack: str = STACK, key: str = typer.Option(..., "--key", help=KEY.help),
            uid: int = typer.Option(None, "--uid", help="The member's uid on every node (2000 to 59999); default: "
                                    "the lowest free one from 2001."),
            gpu_hours: str = GPU_HOURS, share: int = SHARE, no_apply: bool = NO_APPLY, head: str = HEAD,
            ssh_config: str = SSH_CONFIG, ssh_user: str = SSH_USER, hosts_by: HostsBy = HOSTS_BY,
            exec_prefix: str = EXEC_PREFIX) -> None:
    """Add a member: a Unix user with their key on the head and every node, and a Slurm user with a share and a
    GPU-hour limit. Running jobs go on; the member can log in once it is applied."""
    from ruamel.yaml.comments import CommentedMap

    line = _key_line(key)

    def change(team: list) -> int:
        if any(isinstance(m, dict) and m.get("name") == name for m in team):
            errors.print(f"[bold red]NAME {escape(name)}[/]: already in {escape(stack)}'s team (goldenenv team set "
                         "changes a member)", soft_wrap=True)
            raise typer.Exit(2)
        used = {m.get("uid") for m in team if isinstance(m, dict)}
        member = CommentedMap(name=name, uid=uid if uid is not None else next(u for u in count(FIRST_UID)
                                                                               if u not in used))
        member["sshPublicKey"] = line
        if _hours(gpu_hours) is not None:
            member["gpuHours"] = _hours(gpu_hours)
        if share is not None:
            member["share"] = share
        team.append(member)
        return len(team) - 1

    spec = _edit(stack, change, _reach(head, ssh_config, ssh_user, hosts_by, exec_prefix))
    added = next(m for m in spec.team if m.name == name)
    console.print(f"added {escape(name)} (uid {added.uid}) to {escape(stack)}'s team", highlight=False)
    _apply(spec, no_apply, head, ssh_config, ssh_user, hosts_by, exec_prefix)


@app.command("remove")
def remove_cmd(name: str = NAME, stack: str = STACK, no_apply: bool = NO_APPLY, head: str = HEAD,
               ssh_config: str = SSH_CONFIG, ssh_user: str = SSH_USER, hosts_by: HostsBy = HOSTS_BY,
               exec_prefix: str = EXEC_PREFIX) -> None:
    """Remove a member: once applied they can no longer log in or queue jobs. goldenenv stops none of their running
    jobs and deletes nothing of theirs: their home folder and their accounting history stay."""
    def change(team: list) -> int:
        found = _find(team, name, stack)
        del team[found]
        return -1

    spec = _edit(stack, change, _reach(head, ssh_config, ssh_user, hosts_by, exec_prefix))
    console.print(f"removed {escape(name)} from {escape(stack)}'s team", highlight=False)
    _apply(spec, no_apply, head, ssh_config, ssh_user, hosts_by, exec_prefix)


@app.command("set")
def set_cmd(name: str = NAME, stack: str = STACK, key: str = KEY, gpu_hours: str = GPU_HOURS, share: int = SHARE,
            no_apply: bool = NO_APPLY, head: str = HEAD, ssh_config: str = SSH_CONFIG, ssh_user: str = SSH_USER,
            hosts_by: HostsBy = HOSTS_BY, exec_prefix: str = EXEC_PREFIX) -> None:
    """Change a member's key, GPU-hour limit or share. A raised limit releases their jobs Slurm held for it; a
    lowered one holds their next job, never a running one."""
    if key is None and gpu_hours is None and share is None:
        errors.print("nothing to set: give --key, --gpu-hours or --share")
        raise typer.Exit(2)
    line = _key_line(key) if key is not None else None

    def change(team: list) -> int:
        found = _find(team, name, stack)
        member = team[found]
        if line is not None:
            member["sshPublicKey"] = line
        if gpu_hours is not None:
            if _hours(gpu_hours) is None:
                member.pop("gpuHours", None)
            else:
                member["gpuHours"] = _hours(gpu_hours)
        if share is not None:
            member["share"] = share
        return found

    spec = _edit(stack, change, _reach(head, ssh_config, ssh_user, hosts_by, exec_prefix))
    console.print(f"changed {escape(name)} in {escape(stack)}'s team", highlight=False)
    _apply(spec, no_apply, head, ssh_config, ssh_user, hosts_by, exec_prefix)


@app.command("apply")
def apply_cmd(stack: str = STACK, head: str = HEAD, ssh_config: str = SSH_CONFIG, ssh_user: str = SSH_USER,
              hosts_by: HostsBy = HOSTS_BY, exec_prefix: str = EXEC_PREFIX) -> None:
    """Apply the stack file's team to the running cluster (add, remove and set do it themselves): after an edit by
    hand, or one made with --no-apply."""
    _apply(stack_spec(stack), False, head, ssh_config, ssh_user, hosts_by, exec_prefix)

"""How a user logs in to a cloud stack's nodes: the pool's SSH key as the cloud's key pair, shared by the clouds.

Each cloud says which key types it imports and how its nodes are reached (clouds/<name>/nodes.py); this module
names the key pair and words the check and the plan's note the same way on every cloud.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from goldenenv.spec import ClusterSpec, ConfigError, NodePool, Problem, pool_key

KEY_PAIR_NAME_MAX = 128
"""Alibaba's limit (ImportKeyPair KeyPairName: 2 to 128, a letter first, letters, digits, `:`, `_`, `-`); EC2's
is 255 ASCII characters, so one name fits both."""


@dataclass(frozen=True)
class NodeKey:
    """A pool's key pair: its name in the cloud and the public key line it imports."""

    name: str
    public_key: str


def node_key(spec: ClusterSpec, pool: NodePool) -> NodeKey | None:
    """The pool's key pair, or None when the pool gives no sshPublicKey.

    The name carries the key's digest, so a new key is a new key pair (created before the old one is deleted, no
    name clash) and the nodes' reference to it changes, which plan then reports per node."""
    key = pool.ssh_key
    if key is None:
        return None
    digest = hashlib.sha256(key.blob).hexdigest()[:8]
    return NodeKey(key_pair_name("goldenenv", spec.tags.project, spec.stack, pool.name, digest), key.line)


def head_key(spec: ClusterSpec) -> NodeKey | None:
    """The Slurm head's key pair: the first pool's key that has one (users log in to the head as to the nodes), as
    a key pair of its own (a pool's is created with the pool, after the head); None when no pool gives a key."""
    key = next((pool.ssh_key for pool in spec.nodes if pool.ssh_key is not None), None)
    if key is None:
        return None
    digest = hashlib.sha256(key.blob).hexdigest()[:8]
    return NodeKey(key_pair_name("goldenenv", spec.tags.project, spec.stack, "head", digest), key.line)


def key_pair_name(*parts: str) -> str:
    """The parts joined by `-`, other characters made `-`, shortened with a hash past KEY_PAIR_NAME_MAX."""
    text = re.sub(r"[^A-Za-z0-9_-]+", "-", "-".join(parts)).strip("-")
    if len(text) <= KEY_PAIR_NAME_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:KEY_PAIR_NAME_MAX - 9].rstrip('-')}-{digest}"


def key_type_problems(spec: ClusterSpec, accepted: tuple[str, ...], importer: str) -> list[Problem]:
    """A pool key of a type the cloud does not import, at its key (importer: who refuses it, with the source)."""
    problems = []
    for i, pool in enumerate(spec.nodes):
        key = pool.ssh_key
        if key is not None and key.type not in accepted:
            problems.append(Problem(
                f"{pool_key(i, len(spec.nodes))}.sshPublicKey",
                f"{key.type} keys are not imported by {importer}; use one of {', '.join(accepted)} "
                f"(e.g. `ssh-keygen -t {'ed25519' if 'ssh-ed25519' in accepted else 'rsa -b 4096'}`)",
            ))
    return problems


def login_notes(spec: ClusterSpec, user: str, with_key: str, without_key: str) -> list[str]:
    """What plan says about logging in: which pools take which key (by fingerprint, never the key), how the nodes
    are reached with it (with_key), and what pools without a key leave (without_key)."""
    keyed = [(pool, pool.ssh_key) for pool in spec.nodes if pool.ssh_key is not None]
    bare = [pool.name for pool in spec.nodes if pool.ssh_key is None]
    notes = []
    if keyed:
        takes = "; ".join(f"{pool.name} takes {key.type} {key.fingerprint}" + (f" ({key.comment})" if key.comment
                                                                               else "") for pool, key in keyed)
        notes.append(f"ssh logins as {user} with your key: {takes}. {with_key}")
    if bare:
        notes.append(f"{', '.join(bare)}: no nodes.sshPublicKey, so the nodes take no SSH key. {without_key}")
    return notes


def login_name(login, given: str | None = None, run=None) -> str:
    """The ssh login: --ssh-user when given, else the cloud's shared user, else the caller's own name as the
    cloud's CLI prints it (OS Login's POSIX user, Entra ID's UPN); a ConfigError naming --ssh-user when none."""
    import subprocess

    if given:
        return given
    if login.user:
        return login.user
    words = " ".join(login.caller)
    try:
        done = (run or subprocess.run)(list(login.caller), capture_output=True, text=True, timeout=60)
    except (FileNotFoundError, subprocess.TimeoutExpired) as e:
        said = f"{login.caller[0]} is not on PATH" if isinstance(e, FileNotFoundError) else "no answer in 60 s"
        raise ConfigError([Problem("--ssh-user", f"the hosts take your own login ({login.how}); finding it with "
                                   f"`{words}` failed ({said}): {login.caller_setup}, or give --ssh-user")]) from None
    name = done.stdout.strip().splitlines()[0].strip() if done.returncode == 0 and done.stdout.strip() else ""
    if not name:
        raise ConfigError([Problem("--ssh-user", f"the hosts take your own login ({login.how}); `{words}` printed "
                                   f"none ({(done.stderr or '').strip()[:200]}): {login.caller_setup}, or give "
                                   "--ssh-user")])
    return name


def docker_words(logins) -> list[str]:
    """`docker`, or `sudo -n docker` when any of these logins reaches Docker only through sudo."""
    from goldenenv.clouds.base import DockerReach

    return ["sudo", "-n", "docker"] if any(login.docker is DockerReach.SUDO for login in logins) else ["docker"]


def node_targets(cloud, spec: ClusterSpec, outputs: dict, given: str | None, by, run=None) -> list[str]:
    """Every node's ssh:// host in output order, each as its pool's login (--ssh-user for all when given)."""
    users: list[str] = []
    resolved: dict[str | None, str] = {}
    for pool in spec.nodes:
        login = cloud.node_login(spec, pool)
        if login.user not in resolved:
            resolved[login.user] = login_name(login, given, run)
        users += [resolved[login.user]] * pool.count
    hosts = {user: cloud.node_hosts(spec, outputs, user, by) for user in dict.fromkeys(users)}
    if len(hosts) <= 1:
        return next(iter(hosts.values()), [])
    return [hosts[user][i] for i, user in enumerate(users) if i < len(hosts[user])]

"""What every emulated cloud head must show of Slurm accounting (issue 41): slurmdbd running in the head's golden
container on the MariaDB it runs itself, the stack's cluster registered with it (`sacctmgr -n show cluster`), and the
database opened with a password the head made from the stack's munge key, the key it fetched from the cloud's secret
store stand-in, so the password is in no user data, store or log.

These need the golden image with slurmdbd and mariadb-server (the lead's image for issue 41); each emulated cloud's
test module calls `shows_accounting` on the head it already booted, so no host is booted for them alone.
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
import shlex

from goldenenv import nodeboot, slurm
from goldenenv.slurm import config as slurm_config

DERIVATION = b"\ngoldenenv slurmdbd accounting database\n"
"""What goldenenv-slurm (goldenenv/slurm/entry.sh, db_password) hashes after the munge key: the password is the first
48 hex digits of SHA-256 over both."""
SLURMDBD_CONF = "/etc/slurm/slurmdbd.conf"
"""Where slurmdbd reads its configuration in the golden container (Slurm's default path, beside slurm.conf)."""


def in_head(head, command: str) -> tuple[int, str]:
    """A command in the head's golden container, as root."""
    return head.host.sh(f"docker exec goldenenv {command}")


def conf_value(head, key: str) -> str:
    rc, out = in_head(head, f"sed -n 's/^{key}=//p' {SLURMDBD_CONF}")
    assert rc == 0, out
    return out.strip()


def clusters(head) -> list[str]:
    rc, out = in_head(head, "sacctmgr -n -P show cluster format=cluster")
    return out.split() if rc == 0 else []


def shows_accounting(head, spec, never_in: dict[str, str], timeout: float = 180) -> str:
    """Assert the head's accounting as issue 41 asks, on a head whose units are up; returns the database's password.
    `never_in`: what a deployer or another host can read (user data, the secret store's values, plan outputs), by
    name, none of which may hold the password."""
    cluster = slurm_config.cluster_name(spec.stack)
    head.host.wait_for(f"slurmdbd answering with cluster {cluster}", lambda: cluster in clusters(head), timeout)
    for daemon in ("slurmdbd", "mariadbd"):
        rc, out = in_head(head, f"pgrep -x {daemon}")
        assert rc == 0, f"{daemon} is not running in the head's golden container"
    mounts = {m["Destination"]: m for m in head.host.golden().attrs["Mounts"]}
    assert mounts[slurm.DB_DIR]["Type"] == "bind", "the database's folder is the host's: it outlives the container"
    db, state = mounts[slurm.DB_DIR]["Source"], mounts[slurm.STATE_DIR]["Source"]
    assert posixpath.dirname(db) == posixpath.dirname(state) and db != state, "beside slurmctld's state, not in it"

    password, user = conf_value(head, "StoragePass"), conf_value(head, "StorageUser")
    assert password and user, f"{SLURMDBD_CONF} names the database's user and password"
    rc, out = in_head(head, f"env MYSQL_PWD={shlex.quote(password)} mysql -u {shlex.quote(user)} -N -e 'SELECT 1'")
    assert rc == 0 and out.strip() == "1", f"the database refuses slurmdbd's password: {out}"

    rc, key = head.host.sh(f"base64 -w0 {nodeboot.MUNGE_KEY_FILE}")
    assert rc == 0 and key, "the head holds the munge key it fetched from the secret store stand-in"
    assert password not in (key, base64.b64decode(key).decode("latin-1")), "made from the key, never the key itself"
    derived = hashlib.sha256(base64.b64decode(key) + DERIVATION).hexdigest()[:48]
    assert password == derived, "the password is the one any head derives from the stack's munge key: a replaced head " \
                                "opens the same database"
    logs = {"the head's journal": head.host.sh("journalctl -b --no-pager")[1],
            "the golden container's log": head.host.sh("docker logs goldenenv 2>&1")[1]}
    for where, text in {**never_in, **logs}.items():
        assert password not in text, f"the database's password is in {where}"
    return password

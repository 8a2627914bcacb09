"""The team file: the stack's members as the cluster applies them, and writing it to a running cluster.

`goldenenv team` and `up` write one tab-separated file on the shared file system, `<jobs>/.goldenenv/team.tsv`:

    member  <name>  <uid>  <share>  <GPU-minutes a month, or ->  <ssh public key>
    cluster <GPU-minutes a month, or ->  <tres>

Inside every golden container a loop (`goldenenv-team`, in the image) applies it within seconds: a Unix user per
member with that uid and a home on the shared file system, their key as the way in; on the head, Slurm's
associations (account `team`, each member's fairshare and GrpTRESMins on <tres>, the account's GrpTRESMins from the
cluster line, the stack's monthly budget at its dearest GPU price). The head then writes
`<jobs>/.goldenenv/team.applied`: `<sha256 of the file>\t<ok|error>\t<message>`. Applying only changes users and
limits: a running job is never restarted; a member over a new limit has their next job held PENDING.
"""

from __future__ import annotations

import hashlib
import shlex
import time

from goldenenv import clouds
from goldenenv.clouds.base import NodeReach
from goldenenv.gpuprice import cluster_gpu_minutes
from goldenenv.jobs import Head, HeadError, places
from goldenenv.slurm.config import accounting_tres
from goldenenv.spec import ClusterSpec

FOLDER = ".goldenenv"
"""goldenenv's own files in the jobs folder, beside the jobs' output."""
TEAM_FILE, APPLIED_FILE = "team.tsv", "team.applied"
NO_LIMIT = "-"
"""A limit column with no limit."""
POLL_SECONDS = 1.0


def team_path(spec: ClusterSpec) -> str:
    return f"{places(spec).jobs}/{FOLDER}/{TEAM_FILE}"


def applied_path(spec: ClusterSpec) -> str:
    return f"{places(spec).jobs}/{FOLDER}/{APPLIED_FILE}"


def tres(spec: ClusterSpec) -> str:
    """The Slurm TRES the limits count: the nodes' accelerators (gres/gpu, or gres/npu on an Ascend stack), the one
    slurm.conf accounts (AccountingStorageTRES)."""
    return accounting_tres(spec)


def team_file(spec: ClusterSpec) -> str:
    """The file's text: one `member` line per member in the stack file's order, then the `cluster` line. A valid key
    holds no tab or line break (spec.Member reads it), so it is safely the last column."""
    lines = ["\t".join(("member", m.name, str(m.uid), str(m.share), _minutes(m.gpu_minutes), m.ssh_public_key))
             for m in spec.team]
    lines.append("\t".join(("cluster", _minutes(cluster_gpu_minutes(spec)), tres(spec))))
    return "".join(line + "\n" for line in lines)


def _minutes(minutes: int | None) -> str:
    return NO_LIMIT if minutes is None else str(minutes)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def apply(head: Head, spec: ClusterSpec, timeout: float = 90, poll: float = POLL_SECONDS) -> str:
    """Write the team file on the head and wait until the head says it applied this very file (its sha256 in the
    marker): "ok" returns the head's message; "error" is a HeadError with it; no answer within `timeout` seconds is a
    HeadError saying where to look."""
    text = team_file(spec)
    path, marker = team_path(spec), applied_path(spec)
    head.check(["mkdir", "-p", path.rsplit("/", 1)[0]])
    head.write(path, text.encode())
    want = digest(text)
    deadline = time.monotonic() + timeout
    while True:
        rc, out = head.run(["cat", marker])
        found, _, rest = out.strip().partition("\t") if rc == 0 else ("", "", "")
        state, _, message = rest.partition("\t")
        if found == want and state == "ok":
            return message
        if found == want and state == "error":
            raise HeadError(f"the head could not apply the team: {message or 'no reason given'}")
        if time.monotonic() >= deadline:
            raise HeadError(f"the head did not apply the team file within {timeout:g} s (it wrote {path}; "
                            f"{marker} does not name it yet): see {_where_to_look(spec)}")
        time.sleep(poll)


def _where_to_look(spec: ClusterSpec) -> str:
    """The head's log, where goldenenv-team says what it did."""
    if clouds.get(spec.cloud).reaches_nodes_by is NodeReach.DOCKER:
        return f"`docker logs goldenenv-{spec.stack}-head`"
    return f"`docker logs goldenenv` on the head node ({shlex.quote(spec.stack)}'s head)"

"""The local cloud's part in recovery: a lost node or head comes back by itself, as EC2's automatic recovery or a
persistent spot request brings back an instance. Runs in the stack's `recovery` container with the engine's socket,
stdlib only.

Docker's restart policy does not do it here: the engine treats `docker kill` as a deliberate stop and leaves the
container down (with `unless-stopped` too), so this loop starts every exited container of the stack that carries
one of the watched labels (the nodes', the head's) after the same short "reboot" delay. The head keeps the queue
across it: slurmctld's state is in a volume. `goldenenv destroy` removes the containers, so nothing it meant to
stop is started again.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import time
import urllib.parse


class EngineConnection(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=30)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(self.path)


def call(engine: str, method: str, path: str) -> tuple[int, bytes]:
    connection = EngineConnection(engine)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def exited(engine: str, stack: str, watched: list[str], stack_label: str) -> list[dict]:
    """The stack's exited containers that carry any of the watched labels (`key` or `key=value`)."""
    down: dict[str, dict] = {}
    for label in watched:  # the engine ANDs the labels of one filter: one query per watched label
        filters = json.dumps({"label": [f"{stack_label}={stack}", label], "status": ["exited"]})
        status, body = call(engine, "GET", "/containers/json?all=1&filters=" + urllib.parse.quote(filters))
        down.update({c["Id"]: c for c in (json.loads(body) if status == 200 else [])})
    return list(down.values())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="goldenenv-recovery")
    parser.add_argument("--stack", required=True)
    parser.add_argument("--delay", type=float, default=5.0, help="seconds a lost container stays down (its reboot)")
    parser.add_argument("--engine", default="/var/run/docker.sock")
    parser.add_argument("--watch", action="append", required=True,
                        help="a label (key or key=value) of containers to start again; repeat for each kind")
    parser.add_argument("--stack-label", default="goldenenv.stack")
    args = parser.parse_args(argv)
    first_seen: dict[str, float] = {}
    while True:
        try:
            down = exited(args.engine, args.stack, args.watch, args.stack_label)
        except OSError as e:
            print(f"goldenenv-recovery: engine not reachable: {e}", file=sys.stderr, flush=True)
            down = []
        now = time.monotonic()
        first_seen = {c["Id"]: first_seen.get(c["Id"], now) for c in down}
        for container in down:
            if now - first_seen[container["Id"]] >= args.delay:
                name = container["Names"][0].lstrip("/")
                status, _ = call(args.engine, "POST", f"/containers/{container['Id']}/start")
                print(f"goldenenv-recovery: {name} was down; started it again (HTTP {status})", flush=True)
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`goldenenv run` on a cloud stack, end to end over real SSH: two nodes from the golden cpu-dev image running sshd,
a key pair made here, a shared volume at the parallel FS's mount point, the rendezvous on their private network."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import lifecycle
from goldenenv.cli import app
from goldenenv.images.dockerfile import BuildOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLOUD_STACK = "aws-p5-2node"
"""A cloud stack with a parallel FS (/fsx): code goes there once, checkpoints to /fsx/checkpoints."""
NODE_DOCKERFILE = """\
FROM {golden}
USER root
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -yq --no-install-recommends openssh-server \\
 && rm -rf /var/lib/apt/lists/* && mkdir -p /run/sshd /fsx && chown trainer:trainer /fsx && usermod -p '*' trainer \\
 && echo "PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin" >> /etc/environment
CMD ["/usr/sbin/sshd", "-D", "-e"]
"""
"""A node: the golden image with sshd; a login sees the image's torch (pam_env reads /etc/environment)."""
RANK_ENV = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def node_image(client) -> str:
    golden = lifecycle.ensure_image(lifecycle.load_spec("local"), BuildOptions.from_environment(), client,
                                    lambda m: None)
    tag = f"goldenenv-test/ssh-node:{golden.rsplit(':', 1)[-1]}"
    try:
        client.images.get(tag)
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound: build it once
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            data = NODE_DOCKERFILE.format(golden=golden).encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        client.images.build(fileobj=io.BytesIO(context.getvalue()), custom_context=True, tag=tag, rm=True)
    return tag


@pytest.fixture(scope="module")
def nodes(client, node_image, tmp_path_factory):
    """Two sshd nodes; the test reaches them on 127.0.0.1 ports, they reach each other on their network."""
    folder = tmp_path_factory.mktemp("ssh")
    key = folder / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    config = folder / "ssh_config"
    config.write_text(f"Host *\n  IdentityFile {key}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
                      "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n  ConnectTimeout 10\n")
    name = f"goldenenv-ssh-{uuid.uuid4().hex[:6]}"
    network = client.networks.create(name, driver="bridge")
    volume = client.volumes.create(f"{name}-fsx")
    containers = []
    try:
        for i in range(2):
            container = client.containers.run(
                node_image, detach=True, name=f"{name}-{i}", hostname=f"ssh-node-{i}", network=name, user="root",
                volumes={volume.name: {"bind": "/fsx", "mode": "rw"}}, ports={"22/tcp": ("127.0.0.1", None)})
            containers.append(container)
            authorize = (f"mkdir -p /home/trainer/.ssh && echo '{(folder / 'id_ed25519.pub').read_text().strip()}' "
                         "> /home/trainer/.ssh/authorized_keys && chown -R trainer:trainer /home/trainer/.ssh "
                         "&& chmod 700 /home/trainer/.ssh && chmod 600 /home/trainer/.ssh/authorized_keys")
            assert container.exec_run(["sh", "-c", authorize]).exit_code == 0
        hosts, addresses = [], []
        for container in containers:
            container.reload()
            settings = container.attrs["NetworkSettings"]
            hosts.append(f"ssh://trainer@127.0.0.1:{settings['Ports']['22/tcp'][0]['HostPort']}")
            addresses.append(settings["Networks"][name]["IPAddress"])
        for host in hosts:
            port = host.rsplit(":", 1)[1]
            deadline = time.monotonic() + 30
            while subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", "-p", port, "trainer@127.0.0.1",
                                  "true"], capture_output=True).returncode:
                assert time.monotonic() < deadline, f"sshd on {host} did not answer"
                time.sleep(0.5)
        yield {"hosts": hosts, "addresses": addresses, "config": str(config), "containers": containers}
    finally:
        for container in containers:
            container.remove(force=True)
        network.remove()
        volume.remove(force=True)


def test_training_runs_on_both_nodes_over_ssh_and_checkpoints_to_the_shared_fs(nodes):
    spec = lifecycle.load_spec(CLOUD_STACK)
    addresses = nodes["addresses"]
    outputs = {"nodePrivateIps": addresses, "launchEnv": {"MASTER_ADDR": addresses[0], "MASTER_PORT": "29500",
                                                          "NNODES": "2", "NPROC_PER_NODE": "2"}}
    lines: list[tuple[str, str]] = []
    steps: list[str] = []
    start = time.monotonic()
    result = lifecycle.run_remote(
        spec, ["python", "/fsx/code/train_ddp.py", "--steps", "20", "--checkpoint-every", "10", "--log-every", "5"],
        lambda node, text: lines.append((node, text)), hosts=nodes["hosts"], outputs=outputs,
        ssh_config=nodes["config"], exec_prefix="", code=EXAMPLES, env=RANK_ENV, log=steps.append)
    assert result.ok, "\n".join(f"[{n}] {t}" for n, t in lines)
    assert time.monotonic() - start < 90
    assert any("/fsx/code" in s and "shared file system" in s for s in steps), steps
    assert any(n == "node-0" and t.startswith("[default0]:") for n, t in lines), "node- and rank-prefixed lines"
    done = [json.loads(t[t.index("{"):]) for n, t in lines if '"event": "done"' in t]
    assert len(done) == 1 and done[0]["final_step"] == 20 and done[0]["world_size"] == 4
    # checkpoints where the stack keeps them: the parallel FS (here the shared volume), seen from the other node
    latest = nodes["containers"][1].exec_run(["cat", "/fsx/checkpoints/latest"])
    assert latest.exit_code == 0 and latest.output.decode().strip() == "step-00000020.pt"


def test_a_failing_node_stops_the_other_and_the_cli_names_it(nodes):
    """Through the CLI with --hosts: the nodes tell their own addresses; node-1 fails, node-0 would sleep 120 s."""
    command = ("import os, socket, sys, time; print('rank', os.environ['RANK'], flush=True); "
               "sys.exit(3) if socket.gethostname() == 'ssh-node-1' else time.sleep(120)")
    start = time.monotonic()
    result = CliRunner().invoke(app, [
        "run", "-s", CLOUD_STACK, "--hosts", ",".join(nodes["hosts"]), "--ssh-config", nodes["config"],
        "--exec-prefix", "", "--nproc-per-node", "1", "--", "python", "-c", command])
    elapsed = time.monotonic() - start
    assert result.exit_code == 1, result.output
    assert "a rank failed on node-1 (" + nodes["hosts"][1] + ")" in " ".join(result.output.split())
    printed = " ".join(result.output.split())
    assert "[node-0] [default0]:rank" in printed and "[node-1] [default0]:rank" in printed, "node and rank prefixes"
    assert elapsed < 60, f"the surviving node was not stopped ({elapsed:.0f} s)"
    survivors = nodes["containers"][0].exec_run(["sh", "-c", "ps -eo args | grep -c '[t]ime.sleep(120)' || true"])
    assert survivors.output.decode().strip() == "0", "nothing of the run is left on node-0"

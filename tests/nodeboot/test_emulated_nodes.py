"""Every shipped cloud stack's node boots for real: the user data the program renders, run by cloud-init and systemd
on an emulated host (its Slurm head booting beside it: the node's golden container runs slurmd, with the munge key
the head wrote); the golden container comes up by digest with its mounts, the stack's key logs in, validate and run
work over ssh, and a stop/start brings everything back. The head's own tests: test_slurm_head.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import emulated_stack
import stand_ins

from goldenenv import catalog, fabrics, jobs, lifecycle
from goldenenv.images.dockerfile import UID

pytestmark = pytest.mark.node_boot

CLOUD_STACKS = emulated_stack.CLOUD_STACKS
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GOLDEN_LOCK = emulated_stack.GOLDEN_LOCK


@pytest.fixture(scope="module")
def nodes(stacks):
    """Every stack's first node (its head boots beside it)."""
    return {stack: booted.node for stack, booted in stacks.items()}


def up(booted) -> None:
    """Every goldenenv unit active and the golden container running."""
    booted.up()


def in_golden(booted, command: str) -> tuple[int, str]:
    """A command in the node's golden container as the image's user, the way `goldenenv run` and `validate` reach
    it (the container itself runs slurmd as root)."""
    return booted.host.sh(f"{jobs.container_exec(booted.spec)} sh -c {json.dumps(command)}")


def expected_mounts(booted) -> dict[str, str]:
    """Container path -> the machine folder that must back it: the shared FS server's export, the instance store."""
    spec, shares = booted.spec, booted.shares
    mounts = {}
    if "sharedfs" in shares:
        mounts[spec.storage.parallel_fs.mount_point] = shares["sharedfs"]
    if "nvme" in shares:
        mounts[spec.storage.local_nvme.mount_point] = shares["nvme"]
    return mounts


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_the_node_boots_into_the_golden_container_by_digest_with_its_mounts(nodes, golden_ref, client, stack):
    booted = nodes[stack]
    up(booted)
    golden = booted.host.golden()
    assert golden.attrs["Config"]["Image"] == golden_ref, "the container runs the locked digest"
    assert golden.image.id == client.images.get(golden_ref).id
    assert golden.attrs["HostConfig"]["RestartPolicy"]["Name"] in ("", "no"), "systemd owns its restarts"
    sources = {m["Destination"]: m["Source"] for m in golden.attrs["Mounts"]}
    for path, backing in expected_mounts(booted).items():
        assert sources.get(path) == backing, f"{path} is the node's mounted volume, not a root-disk folder"

    # the fabric's NCCL environment, as the catalog gives it, in the env file and in the container
    pool = booted.spec.nodes[0]
    rdma = catalog.instance_type(booted.spec.cloud, pool.instance_type).rdma
    wanted = fabrics.get(rdma).env() if fabrics.get(rdma) and pool.rdma is not False else {}
    _, env_file = booted.host.sh("cat /etc/goldenenv/launch.env")
    _, inside = in_golden(booted, "env")
    for name, value in {**wanted, "GOLDENENV_STACK": stack}.items():
        assert f"{name}={value}" in env_file.splitlines(), name
        assert f"{name}={value}" in inside.splitlines(), name
    if rdma == "erdma":
        assert any(line.startswith("NCCL_") for line in env_file.splitlines())


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_scratch_and_the_code_folder_are_the_image_users(nodes, stack):
    booted = nodes[stack]
    up(booted)
    scratch = booted.spec.storage.local_nvme.mount_point
    code, _ = lifecycle.code_dir(booted.spec)
    rc, out = in_golden(booted, f"id -u && touch {scratch}/probe && mkdir -p {code}/probe && touch {code}/probe/x "
                                f"&& stat -c %u {scratch} {code}")
    assert rc == 0, out
    assert out.split() == [str(UID)] * 3


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_the_stacks_key_logs_in_and_validate_and_run_succeed_over_ssh(nodes, stack_key, tmp_path, stack):
    booted = nodes[stack]
    up(booted)
    host = booted.host
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    refused = subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                              "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-i", str(stranger),
                              f"{host.login}@{host.address}", "true"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 255 and "Permission denied" in refused.stderr, "only the stack's key logs in"

    exec_prefix = jobs.container_exec(booted.spec)
    result = lifecycle.validate_hosts(GOLDEN_LOCK, [host.ssh_host], exec_prefix=exec_prefix,
                                      ssh_config=str(stack_key["config"]), log=lambda m: None)
    assert result.image_ok, result.image_checks[-3000:]
    assert result.ok, (result.drift, result.allreduce_note)

    address = host.address
    outputs = {"nodePrivateIps": [address], "launchEnv": {"MASTER_ADDR": address, "MASTER_PORT": "29500",
                                                         "NNODES": "1", "NPROC_PER_NODE": "2"}}
    code, _ = lifecycle.code_dir(booted.spec)
    checkpoints = [] if booted.spec.storage.parallel_fs.enabled else [
        "--checkpoint-dir", f"{booted.spec.storage.local_nvme.mount_point}/checkpoints"]
    lines: list[str] = []
    run = lifecycle.run_remote(
        booted.spec, ["python", f"{code}/train_ddp.py", "--steps", "10", "--checkpoint-every", "5",
                      "--log-every", "5", *checkpoints],
        lambda node, text: lines.append(text), hosts=[host.ssh_host], outputs=outputs,
        ssh_config=str(stack_key["config"]), exec_prefix=exec_prefix, code=EXAMPLES, env={"OMP_NUM_THREADS": "1"},
        log=lines.append)
    assert run.ok, "\n".join(lines[-40:])
    done = [json.loads(t[t.index("{"):]) for t in lines if '"event": "done"' in t]
    assert len(done) == 1 and done[0]["final_step"] == 10 and done[0]["world_size"] == 2


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_a_stop_start_brings_every_unit_and_the_container_back_with_its_mounts(nodes, stack):
    booted = nodes[stack]
    up(booted)
    code, _ = lifecycle.code_dir(booted.spec)
    shared = booted.spec.storage.parallel_fs.enabled
    assert in_golden(booted, f"echo kept > {code}/before-restart")[0] == 0
    before = booted.host.golden().id

    booted.host.restart()
    up(booted)
    golden = booted.host.golden()
    assert golden.id != before, "a new container, with the mounts the node has now"
    sources = {m["Destination"]: m["Source"] for m in golden.attrs["Mounts"]}
    for path, backing in expected_mounts(booted).items():
        assert sources.get(path) == backing, path
    rc, out = in_golden(booted, f"cat {code}/before-restart")
    if shared:
        assert (rc, out.strip()) == (0, "kept"), "the shared file system outlives a stop/start"
    elif "nvme" in booted.shares:
        assert rc != 0, "instance store comes back blank after a stop/start, as on EC2"


@pytest.mark.parametrize("stack", ["aws-p5-2node"])
def test_the_container_waits_for_a_shared_file_system_that_is_not_there_yet(nodes, stack):
    """A mount that fails (the file system still being created) is retried; meanwhile no container runs on an
    empty root-disk folder, and once the mount succeeds the container comes up with it."""
    booted = nodes[stack]
    up(booted)
    host = booted.host
    assert host.sh(f"touch {stand_ins.CONFIG}/lustre-down")[0] == 0
    host.restart()
    host.wait_for("the FSx mount failing", lambda: "goldenenv-fsx: mounting" in host.sh(
        "journalctl -b -u goldenenv-fsx --no-pager")[1], timeout=120)
    states = host.units_state(["goldenenv-fsx.service", "goldenenv-container.service"])
    assert states["goldenenv-fsx.service"] != "active" and states["goldenenv-container.service"] != "active", states
    assert host.golden() is None, "no golden container while its shared file system is missing"
    assert host.sh(f"rm {stand_ins.CONFIG}/lustre-down")[0] == 0
    up(booted)
    sources = {m["Destination"]: m["Source"] for m in host.golden().attrs["Mounts"]}
    assert sources["/fsx"] == booted.shares["sharedfs"]

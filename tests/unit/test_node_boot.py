"""Node boot: systemd units that bring scratch, FSx and the golden container back after every stop/start.

The rendered scripts run here under bash with stub commands (docker, aws, mdadm, mount ...) on PATH, so what they
would do on a node is asserted from the commands they call, not from their text alone.
"""

from __future__ import annotations

import configparser
import subprocess
from pathlib import Path

import pytest
import yaml

from goldenenv import stackconfig
from goldenenv.clouds.aws import lustre_mount
from goldenenv.nodeboot import NodeBoot
from goldenenv.plan import stack_file

DIGEST = "sha256:" + "0123456789abcdef" * 4
ECR_REF = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv/aws-h100@{DIGEST}"
FSX_DNS = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
FSX_MOUNT = "abcdefgh"


@pytest.fixture(scope="module")
def spec():
    values, extra = stackconfig.namespaced(stackconfig.read_stack_file(stack_file("aws-p5-2node")))
    return stackconfig.load("aws-p5-2node", values, extra)


def with_storage(spec, **changes):
    """The p5 spec with storage fields replaced, e.g. mount points inside a test's temp dir."""
    storage = spec.storage
    local = storage.local_nvme.model_copy(update={k: v for k, v in changes.items() if k == "mount_point"})
    fs = storage.parallel_fs.model_copy(update={k[3:]: v for k, v in changes.items() if k.startswith("fs_")})
    return spec.model_copy(update={"storage": storage.model_copy(update={"local_nvme": local, "parallel_fs": fs})})


def boot_files(spec, image_ref=ECR_REF, **kw) -> tuple[dict, dict[str, str]]:
    text = NodeBoot(spec, "gpu", fabric="efa", local_nvme=True, image_ref=image_ref,
                    registry_login="ecr").cloud_config(
        lustre_mount(kw.get("dns", FSX_DNS), kw.get("mount", FSX_MOUNT)))
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    return doc, {f["path"]: f["content"] for f in doc["write_files"]}


def unit(files: dict[str, str], name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str
    parser.read_string(files[f"/etc/systemd/system/{name}"])
    return parser


def script_of(files: dict[str, str], name: str) -> str:
    return files[unit(files, name)["Service"]["ExecStart"]]


def stub_bin(tmp_path: Path, stubs: dict[str, str]) -> Path:
    """Commands that log their arguments to $STUB_LOG, then run the given bash body."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text(f'#!/bin/bash\necho "{name} $*" >> "$STUB_LOG"\n{body}\n')
        path.chmod(0o755)
    return bin_dir


def run_script(tmp_path: Path, text: str, stubs: dict[str, str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    script = tmp_path / "script.sh"
    script.write_text(text)
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    log = tmp_path / "calls.log"
    log.write_text("")
    env = {"PATH": f"{stub_bin(tmp_path, stubs)}:/usr/bin:/bin", "STUB_LOG": str(log), "HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    return result, log.read_text().splitlines()


# ---------------------------------------------------------------- cloud-init enables the units once


def test_cloud_init_writes_the_units_and_enables_them_once(spec):
    doc, files = boot_files(spec)
    units = ["goldenenv-scratch.service", "goldenenv-fsx.service", "goldenenv-container.service"]
    for name in units:
        assert f"/etc/systemd/system/{name}" in files
        assert script_of(files, name).startswith("#!/bin/bash\n")
    (step,) = doc["runcmd"]
    lines = files[step].splitlines()
    assert "systemctl daemon-reload" in lines
    assert f"systemctl enable --now {' '.join(units)}" in lines
    assert lines.index("systemctl daemon-reload") < lines.index(f"systemctl enable --now {' '.join(units)}")


def test_every_unit_starts_on_every_boot_not_only_the_first(spec):
    _, files = boot_files(spec)
    for name in ("goldenenv-scratch.service", "goldenenv-fsx.service", "goldenenv-container.service"):
        parsed = unit(files, name)
        assert parsed["Install"]["WantedBy"] == "multi-user.target"
        assert parsed["Service"]["Type"] == "oneshot"
        assert parsed["Service"]["RemainAfterExit"] == "yes"
        assert "ConditionFirstBoot" not in files[f"/etc/systemd/system/{name}"]


def test_storage_is_mounted_before_docker_and_fsx_waits_for_the_network(spec):
    _, files = boot_files(spec)
    scratch, fsx = unit(files, "goldenenv-scratch.service"), unit(files, "goldenenv-fsx.service")
    for parsed in (scratch, fsx):
        assert {"docker.service", "goldenenv-container.service"} <= set(parsed["Unit"]["Before"].split())
    assert "network-online.target" in fsx["Unit"]["After"].split()
    assert "network-online.target" in fsx["Unit"]["Wants"].split()


def test_the_container_starts_after_docker_and_its_mounts_and_not_without_them(spec):
    _, files = boot_files(spec)
    container = unit(files, "goldenenv-container.service")["Unit"]
    wanted = {"docker.service", "goldenenv-scratch.service", "goldenenv-fsx.service"}
    assert wanted <= set(container["After"].split())
    assert wanted <= set(container["Requires"].split())


def test_no_mount_is_left_in_fstab_to_hang_a_boot(spec):
    _, files = boot_files(spec)
    for content in files.values():
        assert "/etc/fstab" not in content


def test_without_an_image_ref_no_container_unit_is_written(spec):
    doc, files = boot_files(spec, image_ref=None)
    assert "/etc/systemd/system/goldenenv-container.service" not in files
    (step,) = doc["runcmd"]
    assert "systemctl enable --now goldenenv-scratch.service goldenenv-fsx.service" in files[step].splitlines()


def test_constructor_and_cloud_config_keep_their_old_signature(spec):
    boot = NodeBoot(spec, "gpu", "efa", True)
    doc = yaml.safe_load(boot.cloud_config())
    paths = [f["path"] for f in doc["write_files"]]
    assert "/etc/systemd/system/goldenenv-scratch.service" in paths
    assert not any("fsx" in p or "container" in p for p in paths), "no FSx address, no image: no such units"


# ---------------------------------------------------------------- scratch: RAID0 of instance store, every boot

DISKS = "/dev/nvme1n1 Amazon EC2 NVMe Instance Storage\n/dev/nvme2n1 Amazon EC2 NVMe Instance Storage"
RAID_STUBS = {
    "mountpoint": "exit 1",
    "mdadm": "exit 0",
    "mkfs.xfs": "exit 0",
    "mount": "exit 0",
}


def scratch_script(spec, tmp_path) -> tuple[str, Path]:
    mount_point = tmp_path / "scratch"
    _, files = boot_files(with_storage(spec, mount_point=str(mount_point)))
    return script_of(files, "goldenenv-scratch.service"), mount_point


def test_blank_instance_store_after_stop_start_gets_a_new_array_and_filesystem(spec, tmp_path):
    text, mount_point = scratch_script(spec, tmp_path)
    lsblk = f'case "$1" in -dpno) printf "%s\\n" "{DISKS}" ;; *) echo "$3 disk" ;; esac'
    result, calls = run_script(tmp_path, text, {**RAID_STUBS, "lsblk": lsblk, "blkid": "exit 2"})
    assert result.returncode == 0, result.stderr
    mdadm = [c for c in calls if c.startswith("mdadm ")]
    assert mdadm[0] == "mdadm --assemble --scan", "assemble what a reboot left before creating anything"
    assert mdadm[1] == "mdadm --create /dev/md0 --run --level=0 --raid-devices=2 /dev/nvme1n1 /dev/nvme2n1"
    assert "mkfs.xfs -f /dev/md0" in calls
    assert f"mount -o noatime /dev/md0 {mount_point}" in calls
    assert "blank after a stop/start" in result.stdout


def test_after_a_reboot_the_existing_array_and_data_are_kept(spec, tmp_path):
    text, mount_point = scratch_script(spec, tmp_path)
    lsblk = (f'case "$1" in -dpno) printf "%s\\n" "{DISKS}" ;; '
             '*) printf "%s\\n" "$3 disk" "/dev/md127 raid0" ;; esac')
    result, calls = run_script(tmp_path, text, {**RAID_STUBS, "lsblk": lsblk, "blkid": "exit 0"})
    assert result.returncode == 0, result.stderr
    assert not any(c.startswith(("mdadm --create", "mkfs")) for c in calls)
    assert f"mount -o noatime /dev/md127 {mount_point}" in calls


def test_a_node_without_instance_store_says_so_and_boots_on(spec, tmp_path):
    text, mount_point = scratch_script(spec, tmp_path)
    result, calls = run_script(tmp_path, text, {**RAID_STUBS, "lsblk": "exit 0", "blkid": "exit 2"})
    assert result.returncode == 0, result.stderr
    assert "no local NVMe instance-store disks" in result.stdout
    assert not any(c.startswith(("mdadm", "mkfs", "mount ")) for c in calls)
    assert mount_point.is_dir()


# ---------------------------------------------------------------- FSx mount, every boot


def test_fsx_is_mounted_and_its_folders_made_on_every_boot(spec, tmp_path):
    mount_point = tmp_path / "fsx"
    _, files = boot_files(with_storage(spec, fs_mount_point=str(mount_point)))
    text = script_of(files, "goldenenv-fsx.service")
    stubs = {"mountpoint": "exit 1", "mount": "exit 0", "mount.lustre": "exit 0", "modinfo": "exit 0",
             "apt-get": "exit 1", "curl": "exit 1"}
    result, calls = run_script(tmp_path, text, stubs)
    assert result.returncode == 0, result.stderr
    assert f"mount -t lustre -o relatime,flock {FSX_DNS}@tcp:/{FSX_MOUNT} {mount_point}" in calls
    assert not any(c.startswith(("apt-get", "curl")) for c in calls), "the host image's client is used as it is"
    assert (mount_point / "datasets").is_dir() and (mount_point / "checkpoints").is_dir()


def test_a_failing_fsx_mount_fails_the_unit_so_the_container_stays_down(spec, tmp_path):
    _, files = boot_files(with_storage(spec, fs_mount_point=str(tmp_path / "fsx")))
    text = script_of(files, "goldenenv-fsx.service").replace("sleep 15", "sleep 0")
    stubs = {"mountpoint": "exit 1", "mount": "exit 32", "mount.lustre": "exit 0", "modinfo": "exit 0"}
    result, calls = run_script(tmp_path, text, stubs)
    assert result.returncode != 0
    assert len([c for c in calls if c.startswith("mount -t lustre")]) == 10
    assert "could not mount" in result.stdout


def test_lustre_client_fallback_comes_from_the_fsx_repository_on_s3_not_the_ubuntu_archive(spec):
    _, files = boot_files(spec)
    text = script_of(files, "goldenenv-fsx.service")
    assert "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc" in text
    assert "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu $codename main" in text
    commands = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert not any("archive.ubuntu.com" in line for line in commands)
    update = next(line for line in commands if "apt-get update" in line)
    assert "Dir::Etc::sourceparts=-" in update, "refresh only the FSx source: the others need NAT"


# ---------------------------------------------------------------- the golden container, by digest only

# No image on the node yet; `docker login` reads the password from stdin as the real one does.
DOCKER = 'case "$1" in image) exit 1 ;; login) cat >/dev/null ;; esac; exit 0'
AWS = "echo token"


def test_the_container_is_pulled_by_digest_and_recreated_with_its_mounts(spec, tmp_path):
    _, files = boot_files(spec)
    result, calls = run_script(tmp_path, script_of(files, "goldenenv-container.service"),
                               {"docker": DOCKER, "aws": AWS})
    assert result.returncode == 0, result.stderr
    registry = ECR_REF.split("/")[0]
    assert "aws ecr get-login-password --region us-east-1" in calls
    assert f"docker login --username AWS --password-stdin {registry}" in calls
    assert f"docker pull {ECR_REF}" in calls
    assert calls.index("docker rm -f goldenenv") < next(i for i, c in enumerate(calls) if c.startswith("docker run"))
    run = next(c for c in calls if c.startswith("docker run"))
    assert "--name goldenenv" in run and "--env-file /etc/goldenenv/launch.env" in run
    assert "--volume /scratch:/scratch" in run and "--volume /fsx:/fsx" in run
    assert run.endswith(f"{ECR_REF} sleep infinity")


def test_an_image_already_on_the_node_is_not_pulled_again(spec, tmp_path):
    _, files = boot_files(spec)
    result, calls = run_script(tmp_path, script_of(files, "goldenenv-container.service"),
                               {"docker": "exit 0", "aws": AWS})
    assert result.returncode == 0, result.stderr
    assert not any(c.startswith(("docker pull", "aws ")) for c in calls)
    assert any(c.startswith("docker run") for c in calls)


@pytest.mark.parametrize("ref", [
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv/aws-h100:latest",
    "registry.example.com/golden@sha256:1234",
    f"registry.example.com/golden:v1@{DIGEST.upper()}",
])
def test_a_ref_not_pinned_by_digest_is_refused(spec, tmp_path, ref):
    _, files = boot_files(spec, image_ref=ref)
    result, calls = run_script(tmp_path, script_of(files, "goldenenv-container.service"),
                               {"docker": DOCKER, "aws": AWS})
    assert result.returncode != 0
    assert "digest only" in result.stdout
    assert not any(c.startswith(("docker", "aws")) for c in calls)


@pytest.mark.parametrize("ref", [
    "x; touch pwned",
    "$(touch pwned)",
    "`touch pwned`@" + DIGEST,
    "x'; touch pwned; echo '",
    "registry.example.com/golden@" + DIGEST + "\ntouch pwned",
])
def test_a_hostile_image_ref_cannot_run_a_command(spec, tmp_path, ref):
    _, files = boot_files(spec, image_ref=ref)
    text = script_of(files, "goldenenv-container.service")
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0
    result, calls = run_script(tmp_path, text, {"docker": DOCKER, "aws": AWS, "touch": "exit 0"})
    assert result.returncode != 0
    assert not (tmp_path / "cwd" / "pwned").exists()
    assert not any(c.startswith(("touch", "docker", "aws")) for c in calls)


def test_a_hostile_folder_name_reaches_mkdir_as_one_literal_path(spec, tmp_path):
    mount_point = tmp_path / "fsx"
    hostile = with_storage(spec, fs_mount_point=str(mount_point), fs_dataset_prefix="data; touch pwned $(id)/")
    _, files = boot_files(hostile)
    stubs = {"mountpoint": "exit 1", "mount": "exit 0", "mount.lustre": "exit 0", "modinfo": "exit 0",
             "touch": "exit 0", "id": "exit 0"}
    result, calls = run_script(tmp_path, script_of(files, "goldenenv-fsx.service"), stubs)
    assert result.returncode == 0, result.stderr
    assert (mount_point / "data; touch pwned $(id)").is_dir()
    assert not any(c.startswith(("touch", "id")) for c in calls)
    assert not (tmp_path / "cwd" / "pwned").exists()


def test_rendered_scripts_are_valid_bash(spec):
    _, files = boot_files(spec)
    for path, content in files.items():
        if content.startswith("#!/bin/bash"):
            checked = subprocess.run(["bash", "-n"], input=content, text=True, capture_output=True)
            assert checked.returncode == 0, f"{path}: {checked.stderr}"


def test_scripts_are_executable_and_units_are_not(spec):
    doc, _ = boot_files(spec)
    modes = {f["path"]: f["permissions"] for f in doc["write_files"]}
    for path, mode in modes.items():
        expected = "0644" if path.startswith(("/etc/systemd/", "/etc/goldenenv/")) else "0755"
        assert mode == expected, path

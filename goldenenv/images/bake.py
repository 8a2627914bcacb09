"""Baking one pool's host layer into a host image: `goldenenv host-image build -s STACK [POOL]`.

A build stack of its own (`<stack>-host-image-<pool>`, an inline Automation API program per cloud:
goldenenv/clouds/<cloud>/hostimage.py) makes a build instance from the pool's pinned stock host image, in the
stack's region and zone, private like the stack's nodes, with the host layer's install script as its user data. A
step of the program (HostStep) waits for the install, runs the host checks through the cloud's reach (the same ssh
targets `validate` uses) and seals the host; the capture (an AMI, an Alibaba custom image, a GCP image in a family,
an Azure gallery image version) depends on that step and outlives the build stack. On success the image id is
recorded in images/hosts/<host lock>.published.yaml, then the build stack is destroyed; on any failure the build
stack is destroyed and nothing is recorded: the error names the step that failed.
"""

from __future__ import annotations

import datetime
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pulumi
import pulumi.dynamic

from goldenenv.images.host import HostLayer, HostLock
from goldenenv.images.hostfiles import BakedImage, record
from goldenenv.images.hostinstall import install_script
from goldenenv.spec import ClusterSpec, ConfigError, Problem

NETWORK, BUILD_INSTANCE, INSTALL, CHECKS, CAPTURE, CLEANUP = (
    "build network", "build instance", "install", "host checks", "capture", "cleanup")
"""The steps of a bake, as an error names the one that failed."""
STEP_MARK = "goldenenv host-image step"
"""How HostStep's errors start (`goldenenv host-image step install: ...`): the engine relays the message, and the
orchestrator reads the step from it."""
HOST_LOCK_TAG, LAYER_TAG, BASE_TAG = "goldenenv-host-lock", "goldenenv-host-layer", "goldenenv-host-base"
"""The tags (labels) every captured image carries: the host lock's name and hash, the layer's digest, the base."""
BUILD_PROJECT = "goldenenv-host-image"
"""The Pulumi project of the build stacks, beside the clusters' own in the same backend."""
INSTALL_WAIT_S = 3600
"""The longest the install may take from the build instance's creation (boot, repositories, a driver's DKMS build)."""


class BakeError(RuntimeError):
    """A bake failed at `step`; the build stack was destroyed (or the message says what is left) and nothing was
    recorded."""

    def __init__(self, step: str, message: str):
        self.step = step
        super().__init__(f"{step} failed: {message}")


# ---- the program's values --------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class BakeArgs:
    """What a cloud's bake program takes besides the stack and pool: values, never config."""

    name: str
    """The build stack's name, also the prefix of its resources."""
    base: str
    """The stock host image as the catalog names it (or the stack's own image id)."""
    instance_type: str
    user_data: str
    """The install script of the host layer (goldenenv.images.hostinstall.install_script)."""
    image_name: str
    """The captured image's name: goldenenv-<host lock>-<family>-<layer digest>-<built, UTC>."""
    family: str
    """goldenenv-<host lock>-<family>: a GCP image family, an Azure gallery image definition."""
    tags: dict[str, str]
    """The stack's tags with HOST_LOCK_TAG, LAYER_TAG and BASE_TAG: on the build instance and on the image."""
    step: Any
    """HostStepProvider: what the program's HostStep runs."""
    targets: Callable[[str, str], list[str]]
    """(instance id, private ip) -> the build instance's ssh targets (targets_of)."""
    built: datetime.datetime
    lookup: Any = None
    """What the cloud's program asks of the live cloud (Azure: which gallery parts exist); None: the live cloud."""


@dataclass(frozen=True)
class Bake:
    """What `host-image build` bakes for one pool of a stack."""

    spec: ClusterSpec
    pool: Any
    layer: HostLayer
    host_lock: HostLock
    base: str
    stack_name: str
    instance_type: str
    """The build instance's type: the pool's own unless asked otherwise (a GPU type: the checks run `--gpus all`)."""

    @property
    def image_name(self) -> str:
        return f"{self.family}-{self.layer.digest}"

    @property
    def family(self) -> str:
        return f"goldenenv-{self.host_lock.name}-{self.layer.family.replace('.', '')}"

    @property
    def fabric(self) -> str | None:
        """The build type's RDMA fabric (the pool's by default), whose host checks run too; None without one."""
        from goldenenv import catalog

        node = catalog.instance_types(self.spec.cloud).get(self.instance_type)
        return node.rdma if node and node.has_rdma and self.pool.rdma is not False else None

    def tags(self) -> dict[str, str]:
        return {**self.spec.stack_tags, HOST_LOCK_TAG: f"{self.host_lock.name}-{self.host_lock.content_hash}",
                LAYER_TAG: self.layer.digest, BASE_TAG: self.base[:63]}


def cloud_program(cloud: str):
    """The cloud's bake module (goldenenv/clouds/<cloud>/hostimage.py); None when the cloud has none."""
    try:
        return importlib.import_module(f"goldenenv.clouds.{cloud}.hostimage")
    except ModuleNotFoundError as e:
        if e.name == f"goldenenv.clouds.{cloud}.hostimage":
            return None
        raise


def prepare(spec: ClusterSpec, pool_name: str | None, instance_type: str | None = None) -> Bake:
    """The pool to bake (the stack's first when not named), its host layer, and the build instance's type (the
    pool's unless `instance_type`, a GPU type of the cloud's catalog); ConfigError names what is wrong and what
    would be valid."""
    from goldenenv import catalog, compat
    from goldenenv.images import host
    from goldenenv.images.lock import load

    pools = [p.name for p in spec.nodes]
    if pool_name is None:
        pool = spec.nodes[0]
    elif pool_name in pools:
        pool = spec.nodes[pools.index(pool_name)]
    else:
        raise ConfigError([Problem("POOL", f"{pool_name!r} is not a pool of {spec.stack}; valid: "
                                           f"{', '.join(pools)}")])
    if cloud_program(spec.cloud) is None:
        raise ConfigError([Problem("goldenenv:cloud", f"{spec.cloud} has no host-image program (goldenenv/clouds/"
                                                      f"{spec.cloud}/hostimage.py)")])
    lock = load(spec.image.lock)
    if not getattr(lock, "host", None):
        raise ConfigError([Problem(f"{spec.image.lock}/lock.yaml: host", "the golden lock names no host lock: "
                                   f"add `host: <name>` (host locks: {', '.join(host.host_lock_names()) or 'none'})")])
    layer = host.layer(spec, pool, lock, baked=False)  # what the install step does, an image baked before or not
    where = f"{pool.name} ({pool.instance_type})"
    if layer.missing:
        raise ConfigError([Problem(f"pool {where}", f"{p.need}: {p.why}, and the host lock {layer.host_lock} "
                                   f"has no component for it on {layer.family or 'an unknown OS family'}")
                           for p in layer.missing])
    if not layer.install:
        raise ConfigError([Problem(f"pool {where}", "its host image already carries every pinned component: "
                                   "there is nothing to bake")])
    gpu_types = sorted(name for name, t in catalog.instance_types(spec.cloud).items() if t.gpu_count)
    if instance_type is not None and instance_type not in gpu_types:
        raise ConfigError([Problem("--instance-type", f"{instance_type!r} is not a GPU type of the {spec.cloud} "
                                   f"catalog (the host checks run the GPUs); valid: {', '.join(gpu_types)}")])
    node = compat.node_host(spec.cloud, spec.region, pool.host_image)
    base = node.override_id or node.image.name
    return Bake(spec, pool, layer, host.load_host(layer.host_lock), base, f"{spec.stack}-host-image-{pool.name}",
                instance_type or pool.instance_type)


def bake_args(bake: Bake, step: HostStepProvider, targets: Callable[[str, str], list[str]],
              built: datetime.datetime, lookup: Any = None) -> BakeArgs:
    """The program's values; the image's name ends with the build's time (UTC): names are unique per account."""
    return BakeArgs(name=bake.stack_name, base=bake.base, instance_type=bake.instance_type,
                    user_data=install_script(bake.layer), image_name=f"{bake.image_name}-{built:%Y%m%d%H%M%S}",
                    family=bake.family, tags=bake.tags(), step=step, targets=targets, built=built, lookup=lookup)


# ---- the step between the build instance and the capture ------------------------------------------------------

class StepFailed(Exception):
    def __init__(self, step: str, message: str):
        super().__init__(f"{STEP_MARK} {step}: {message}")


def wait_for_install(targets: list[str], marker: str, ssh_config: str | None, timeout_s: int = INSTALL_WAIT_S,
                     sleep: Callable[[float], None] | None = None) -> None:
    """Until cloud-init (which runs the install script) is done on every target and the script left its marker;
    StepFailed(INSTALL) otherwise, with cloud-init's status and the end of its output log."""
    import subprocess
    import time

    from goldenenv import remote

    ssh, sleep = remote.Ssh(ssh_config), sleep or time.sleep

    def run(target: str, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(ssh.argv(target, command), capture_output=True, stdin=subprocess.DEVNULL)

    for target in targets:
        deadline = time.monotonic() + timeout_s
        status = run(target, "cloud-init status --wait")
        while b"status:" not in status.stdout:  # not reachable yet (booting, ssh not up): ssh's own failure
            if time.monotonic() > deadline:
                said = (status.stderr or status.stdout).decode(errors="replace").strip()[-300:]
                raise StepFailed(INSTALL, f"{target}: not reachable within {timeout_s} s ({said})")
            sleep(15)
            status = run(target, "cloud-init status --wait")
        if run(target, f"test -f {marker}").returncode != 0:
            log = run(target, "sudo -n tail -n 40 /var/log/cloud-init-output.log").stdout.decode(errors="replace")
            raise StepFailed(INSTALL, f"{target}: the install left no {marker} (cloud-init "
                                      f"{status.stdout.decode(errors='replace').strip()}); its log ends:\n{log}")


def run_host_checks(layer: HostLayer, targets: list[str], *, cloud: str, instance_type: str, fabric: str | None,
                    ssh_config: str | None) -> None:
    """The host checks generated from the lock (goldenenv.checks.host), on the build instance; StepFailed(CHECKS)
    naming what drifted when one fails."""
    from goldenenv.checks.host import check_hosts

    result = check_hosts(layer, targets, instance_type=instance_type, cloud=cloud, fabric=fabric,
                         ssh_config=ssh_config)
    if not result.passed:
        drift = "; ".join(f"{t}: {', '.join(lines)}" for t, lines in result.problems.items())
        raise StepFailed(CHECKS, drift or result.output.strip()[-3000:])


def seal(targets: list[str], commands: tuple[str, ...], ssh_config: str | None, instance: str = "",
         local: tuple[tuple[str, ...], ...] = ()) -> None:
    """The cloud's last commands on the build instance before the capture (cloud-init cleaned, so a node booted
    from the image runs its own user data), then its commands here about the instance (Azure: deallocate and mark
    the VM generalized), each word with `{instance}` given the instance's id."""
    import subprocess

    from goldenenv import remote

    for target in targets:
        for command in commands:
            try:
                remote.remote_output(target, command, remote.Ssh(ssh_config))
            except remote.RemoteError as e:
                raise StepFailed(CHECKS, f"sealing the host: {e}") from None
    for words in local:
        argv = [w.format(instance=instance) for w in words]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise StepFailed(CHECKS, f"sealing the host needs {argv[0]} on this machine") from None
        if done.returncode:
            raise StepFailed(CHECKS, f"sealing the host: {' '.join(argv)} exited {done.returncode}: "
                                     f"{(done.stderr or done.stdout).strip()[-500:]}")


class HostStepProvider(pulumi.dynamic.ResourceProvider):
    """Waits for the install, runs the host checks and seals the host, on the build instance's targets: a failure
    fails the `up` before the capture, which depends on this step."""

    def __init__(self, layer: HostLayer, *, cloud: str, instance_type: str, fabric: str | None,
                 seal_commands: tuple[str, ...] = (), local_seal: tuple[tuple[str, ...], ...] = (),
                 ssh_config: str | None = None):
        self.layer = layer
        self.cloud = cloud
        self.instance_type = instance_type
        self.fabric = fabric
        self.seal_commands = seal_commands
        self.local_seal = local_seal
        self.ssh_config = ssh_config

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        from goldenenv.images.hostinstall import done_marker

        targets = list(props["targets"])
        wait_for_install(targets, done_marker(self.layer), self.ssh_config)
        run_host_checks(self.layer, targets, cloud=self.cloud, instance_type=self.instance_type, fabric=self.fabric,
                        ssh_config=self.ssh_config)
        seal(targets, self.seal_commands, self.ssh_config, str(props["instance"]), self.local_seal)
        return pulumi.dynamic.CreateResult(id_=f"checked-{self.layer.digest}", outs=dict(props))


class HostStep(pulumi.dynamic.Resource):
    """The install, the host checks and the seal on the build instance (HostStepProvider)."""

    def __init__(self, name: str, provider: HostStepProvider, targets: pulumi.Input[list[str]],
                 instance: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None):
        super().__init__(provider, name, {"targets": targets, "instance": instance,
                                          "layer": provider.layer.digest}, opts)


def host_step_targets(args: BakeArgs, instance_id: pulumi.Input[str],
                      private_ip: pulumi.Input[str]) -> pulumi.Output[list[str]]:
    """The build instance's ssh targets, once the cloud has given its id and address."""
    return pulumi.Output.all(instance_id, private_ip).apply(lambda v: args.targets(v[0], v[1]))


def targets_of(bake: Bake, hosts_by: Any = None, ssh_user: str | None = None) -> Callable[[str, str], list[str]]:
    """(instance id, private ip) -> the build instance's ssh target, as `validate` reaches the pool's nodes (the
    id as the stack's instanceIds output names a node: an instance id, a GCP instance's name)."""
    from goldenenv import clouds
    from goldenenv.clouds import access
    from goldenenv.clouds.base import HOST_OUTPUTS, HostsBy

    cloud = clouds.get(bake.spec.cloud)
    user = access.login_name(cloud.node_login(bake.spec, bake.pool), ssh_user)
    by = HostsBy(hosts_by or HostsBy.PRIVATE_IP)

    def targets(instance_id: str, private_ip: str) -> list[str]:
        outputs = {HOST_OUTPUTS[HostsBy.INSTANCE_ID]: [instance_id], HOST_OUTPUTS[HostsBy.PRIVATE_IP]: [private_ip]}
        return cloud.node_hosts(bake.spec, outputs, user, by)

    return targets


# ---- orchestration ------------------------------------------------------------------------------------------------

class Driver(Protocol):
    """Runs a build stack: Pulumi's Automation API (PulumiDriver), or a test's stand-in."""

    def up(self, stack_name: str, program: Callable[[], dict[str, Any]], log: Callable[[str], None]) -> dict: ...

    def destroy(self, stack_name: str, program: Callable[[], dict[str, Any]], log: Callable[[str], None]) -> None: ...


def failed_step(error: str, module: Any) -> str:
    """Which step an `up` error comes from: HostStep's own mark, else the resource type the engine names."""
    found = re.search(rf"{STEP_MARK} ({INSTALL}|{CHECKS}):", error)
    if found:
        return found.group(1)
    for token, step in module.STEPS.items():
        if token in error or display_type(token) in error:
            return step
    return NETWORK


def display_type(token: str) -> str:
    """aws:ec2/amiFromInstance:AmiFromInstance -> aws:ec2:AmiFromInstance, as the engine's messages name types."""
    package, module, kind = token.split(":")
    return f"{package}:{module.split('/')[0]}:{kind}"


def bake(target: Bake, driver: Driver, log: Callable[[str], None] = print, hosts_by: Any = None,
         ssh_user: str | None = None, ssh_config: str | None = None, images_dir: Path | None = None,
         lookup: Any = None) -> BakedImage:
    """Up the build stack, record the captured image, destroy the build stack; on any failure destroy it and
    record nothing (BakeError names the step)."""
    module = cloud_program(target.spec.cloud)
    step = HostStepProvider(target.layer, cloud=target.spec.cloud, instance_type=target.instance_type,
                            fabric=target.fabric, seal_commands=tuple(module.SEAL),
                            local_seal=tuple(module.LOCAL_SEAL), ssh_config=ssh_config)
    built = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    args = bake_args(target, step, targets_of(target, hosts_by, ssh_user), built, lookup)

    def program() -> dict[str, Any]:
        return module.program(target.spec, target.pool, args)

    try:
        outputs = driver.up(target.stack_name, program, log)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - whatever stopped the up: the build stack goes
        step = "interrupted" if isinstance(e, KeyboardInterrupt) else failed_step(str(e), module)
        left = _cleanup(target, driver, program, log)
        raise BakeError(step, _tail(str(e)) + left) from None
    image = outputs.get("imageId")
    if not image:
        left = _cleanup(target, driver, program, log)
        raise BakeError(CAPTURE, "the build stack gave no image id" + left)
    entry = BakedImage(target.spec.cloud, target.spec.region, target.base, target.layer.digest, str(image),
                       f"{target.host_lock.name}-{target.host_lock.content_hash}",
                       built.isoformat())
    path = record(target.host_lock.name, entry, images_dir)
    log(f"recorded {image} in {path}")
    left = _cleanup(target, driver, program, log)
    if left:
        raise BakeError(CLEANUP, f"{image} is recorded, but the build stack is not gone:{left}")
    return entry


def _cleanup(target: Bake, driver: Driver, program: Callable[[], dict], log: Callable[[str], None]) -> str:
    """Destroy the build stack (the captured image is retained); '' when done, else what is left and how to end it."""
    try:
        driver.destroy(target.stack_name, program, log)
    except Exception as e:  # noqa: BLE001 - said with the bake's own outcome
        return (f"\nthe build stack {target.stack_name} could not be destroyed ({_tail(str(e))}): its build instance "
                f"may still run; run `goldenenv host-image build -s {target.spec.stack} {target.pool.name}` again or "
                f"`pulumi destroy -s {target.stack_name}` in project {BUILD_PROJECT}")
    log(f"destroyed the build stack {target.stack_name} (build instance, its disks and network)")
    return ""


def _tail(text: str, lines: int = 12, limit: int = 3000) -> str:
    kept = [line.rstrip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n".join(kept)[-limit:]


class PulumiDriver:
    """Build stacks as inline programs of the Automation API, on the user's backend or the project's file backend
    (as goldenenv.automation.stack)."""

    def __init__(self, spec: ClusterSpec):
        from goldenenv import automation

        automation.preflight(spec)

    def _stack(self, stack_name: str, program: Callable[[], dict[str, Any]]):
        from pulumi import automation as auto

        from goldenenv import project

        from goldenenv.automation import workspace_env

        here = project.current()
        env = workspace_env(here)

        def exported() -> None:
            for key, value in program().items():
                pulumi.export(key, value)

        return auto.create_or_select_stack(stack_name=stack_name, project_name=BUILD_PROJECT, program=exported,
                                           opts=auto.LocalWorkspaceOptions(env_vars=env))

    def up(self, stack_name: str, program: Callable[[], dict[str, Any]], log: Callable[[str], None]) -> dict:
        result = self._stack(stack_name, program).up(on_output=log)
        return {k: v.value for k, v in result.outputs.items()}

    def destroy(self, stack_name: str, program: Callable[[], dict[str, Any]], log: Callable[[str], None]) -> None:
        stack = self._stack(stack_name, program)
        stack.destroy(on_output=log)
        stack.workspace.remove_stack(stack_name)

"""The host layer's install step on an emulated node: the first GPU node of a shipped stack whose host image lacks
part of the layer boots from the user data goldenenv renders for it, with the vendors' repositories standing in
on the node's network (tests/nodeboot/apt_stand_in.py: their packages' names and the host lock's versions, signed
with a key made for the run, served over HTTPS). goldenenv-host-layer installs every locked package at its version
and holds it before the golden container starts; a repository whose served key is not the pinned one is refused by
name before apt reads anything from it, nothing is installed, and the golden container does not start.

One host boot for the module; the refusal runs the install step again on the same node, reset to before it.
"""

from __future__ import annotations

import base64
import gzip
import shlex
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import apt_stand_in
import emulated_host
import emulated_stack
from goldenenv import catalog, nodeboot, plan, stackconfig
from goldenenv.checks import host as host_checks
from goldenenv.images import host, lock as image_lock

pytestmark = pytest.mark.node_boot

STACK = "aws-g5-dev"
"""A shipped stack whose catalog host image lacks the pinned engine and container toolkit (host.layer: INSTALL)."""
CAPTURES = Path(__file__).resolve().parents[1] / "unit" / "captures"
OTHER = "+stand-in.1"
"""Appended to a locked version: another version of that package the stand-in serves beside it (a drifted node)."""
SERVED_AT = "apt-host-layer.goldenenv.test"
"""This module's stand-in's name, its own beside any other the run serves (apt_stand_in.NAME)."""
EMULATED_ENGINE = "engine-answers"
"""The host check of the engine's own version: the emulated host's engine is this machine's, never the lock's."""


def stack_spec():
    return stackconfig.load(STACK, *stackconfig.namespaced(stackconfig.read_stack_file(plan.stack_file(STACK))))


@dataclass
class Repositories:
    """The stand-in's content and the project's host lock that points at it."""

    shipped: host.HostLock
    family: str
    key: apt_stand_in.SigningKey
    other: apt_stand_in.SigningKey
    """A key the stand-in does not serve: pinned instead of the served one, it must be refused."""
    root: Path
    lock_file: Path

    def pin(self, wrong: dict[str, str] | None = None) -> None:
        self.lock_file.write_text(yaml.safe_dump(apt_stand_in.project_lock(self.shipped, self.key.fingerprint,
                                                                           wrong, SERVED_AT)))


@dataclass
class Node:
    host: emulated_host.Host
    spec: object
    server: object
    repositories: Repositories

    def layer(self) -> host.HostLayer:
        return host.layer(self.spec, self.spec.nodes[0])

    def script(self) -> str:
        """The host layer's script as the node's user data delivers it now (cloud-init decodes gz+b64)."""
        boot = nodeboot.NodeBoot(self.spec, self.spec.nodes[0].name, "none", False)
        unit = next(u for u in boot.units(None) if u.name == nodeboot.HOST_LAYER_UNIT)
        return gzip.decompress(base64.b64decode(unit.script.content)).decode()

    def journal(self, unit: str) -> str:
        return self.host.sh(f"journalctl -b --no-pager -u {shlex.quote(unit)}")[1]

    def show(self, unit: str, prop: str) -> str:
        return self.host.sh(f"systemctl show -P {prop} {shlex.quote(unit)}")[1].strip()

    def installed(self, names: list[str]) -> dict[str, str]:
        """package -> version, for those of `names` dpkg has installed."""
        _, out = self.host.sh("dpkg-query -W -f '${Package} ${Version} ${db:Status-Status}\\n' "
                              + " ".join(map(shlex.quote, names)) + " 2>/dev/null")
        return {line.split()[0]: line.split()[1] for line in out.splitlines()
                if len(line.split()) == 3 and line.split()[2] == "installed"}

    def requests(self) -> list[str]:
        return [line for line in self.server.logs().decode(errors="replace").splitlines() if '"GET ' in line]


@pytest.fixture(scope="module")
def repositories(tmp_path_factory):
    """The shipped host lock's repositories on the stand-in, and a project images folder whose host lock (the one
    the stack's golden lock names) points there, pinned to the run's key."""
    folder = tmp_path_factory.mktemp("host-layer")
    spec = stack_spec()
    name = image_lock.load(spec.image.lock).host
    shipped = host.load_host(name)
    family = host.layer(spec, spec.nodes[0]).family
    key = apt_stand_in.make_key(folder / "key")
    other = apt_stand_in.make_key(folder / "other", "someone else <other@goldenenv.test>")
    packages = host.layer(spec, spec.nodes[0]).packages()
    apt_stand_in.build(folder / "repository", shipped, [family], key,
                       versions={name: [version + OTHER] for name, version in packages.items()})
    images = folder / "images"
    (images / host.HOSTS).mkdir(parents=True)
    found = Repositories(shipped, family, key, other, folder / "repository", images / host.HOSTS / f"{name}.yaml")
    found.pin()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(image_lock, "IMAGES", images)
        yield found


@pytest.fixture(scope="module")
def node(client, host_image, golden_ref, stack_key, cloud_apis, repositories):
    """The node booting, its stand-in serving with a certificate of the run's CA (the cloud APIs': a host's TLS
    library may pick the wrong one of two CAs of the same name)."""
    spec = stack_spec()
    pool = spec.nodes[0]
    it = catalog.instance_type(spec.cloud, pool.instance_type)
    user_data = nodeboot.NodeBoot(spec, pool.name, "none", False, image_ref=golden_ref).cloud_config()
    authority = cloud_apis.authority
    image = apt_stand_in.host_image(client, host_image)
    name = f"ge-hostlayer-{uuid.uuid4().hex[:4]}"
    network = client.networks.create(f"{name}-net", driver="bridge", labels={"goldenenv.test": "node"})
    server = booted = None
    try:
        server = apt_stand_in.serve(client, image, repositories.root, network, authority, SERVED_AT)
        capture = CAPTURES / f"nvidia_smi_{it.name}.csv"
        booted = emulated_host.Host.create(
            client, image, name=name, networks=[network.name], user_data=user_data,
            public_key=stack_key["public"], login="ubuntu", key=stack_key["key"], shares=[], sharedfs=None,
            nvme=None, erdma=0, gpus=it.gpu_count, nvidia_smi=capture.read_text() if capture.exists() else "",
            health=emulated_stack.healthy_hardware(spec, it), trusted_ca=authority.cert_pem)
        yield Node(booted, spec, server, repositories)
    finally:
        if booted is not None:
            booted.remove()
        if server is not None:
            server.remove(force=True)
        emulated_host.remove_network(network)


def test_the_stack_installs_its_host_layer_at_first_boot():
    """The rule below has something to hold: the stack's host image lacks part of the shipped layer."""
    spec = stack_spec()
    layer = host.layer(spec, spec.nodes[0])
    assert layer.installs and layer.packages(), layer.provided


def test_the_node_installs_and_holds_every_locked_package_before_the_golden_container_starts(node):
    host_ = node.host
    host_.wait_for("the golden container running", lambda: host_.golden() is not None, timeout=300)
    layer = node.layer()
    shipped = node.repositories.shipped
    expected = {package: version for name, _ in layer.install
                for package, version in shipped.components[name].packages[layer.family].items()}
    assert layer.packages() == expected, "the project's lock pins the shipped versions"

    assert node.installed(list(expected)) == expected
    held = set(host_.sh("apt-mark showhold")[1].split())
    assert set(expected) <= held, f"not held: {set(expected) - held}"
    for name in layer.repositories:
        assert host_.sh(f"test -s /etc/apt/keyrings/goldenenv-{name}.gpg")[0] == 0, name
        _, line = host_.sh(f"cat /etc/apt/sources.list.d/goldenenv-{name}.list")
        assert line.startswith(f"deb [signed-by=/etc/apt/keyrings/goldenenv-{name}.gpg] https://{SERVED_AT}/")
    assert any(f"/{name}/" in r and "InRelease" in r for r in node.requests() for name in layer.repositories)

    journal = node.journal(nodeboot.HOST_LAYER_UNIT)
    for name in layer.repositories:
        assert f"keys: repository {name}: key {node.repositories.key.fingerprint}" in journal, journal
    assert "done: host layer ready" in journal, journal
    layer_done = int(node.show(nodeboot.HOST_LAYER_UNIT, "ExecMainExitTimestampMonotonic"))
    container_started = int(node.show(nodeboot.CONTAINER_UNIT, "ExecMainStartTimestampMonotonic"))
    assert 0 < layer_done <= container_started, "the golden container started after the host layer"

    host_.sh(f"systemctl restart {nodeboot.HOST_LAYER_UNIT}")
    assert "installed before" in node.journal(nodeboot.HOST_LAYER_UNIT), "a later run finds the layer's marker"


def test_the_host_checks_pass_after_the_install_and_name_each_package_that_drifted(node):
    """goldenenv.checks.host on the node (docker://): every locked package passes; one moved to another version and
    one removed fail by name with what the lock pins."""
    host_ = node.host
    host_.wait_for("the golden container running", lambda: host_.golden() is not None, timeout=300)
    layer = node.layer()
    target = f"docker://{host_.name}"

    def failed() -> tuple[list[str], list[str]]:
        result = host_checks.check_hosts(layer, [target], instance_type=None, cloud=node.spec.cloud, sudo=False)
        found = [(i, p) for i, p in zip(result.failures.get(target, []), result.problems.get(target, []),
                                        strict=True) if i != EMULATED_ENGINE]
        return [i for i, _ in found], [p for _, p in found]

    assert failed() == ([], [])
    packages = layer.packages()
    moved, removed = list(packages)[0], list(packages)[-1]
    rc, out = host_.sh(f"apt-get install -y --allow-change-held-packages {moved}={packages[moved]}{OTHER} "
                       f"&& dpkg --purge --force-depends {removed}")
    assert rc == 0, out
    try:
        ids, problems = failed()
        assert len(ids) == 2, problems
        assert any(moved in p and f"{packages[moved]}{OTHER}" in p and f"the lock pins {packages[moved]}" in p
                   for p in problems), problems
        assert any(removed in p and f"not installed, the lock pins {packages[removed]}" in p for p in problems)
    finally:
        pinned = " ".join(shlex.quote(f"{n}={packages[n]}") for n in (moved, removed))
        host_.sh(f"apt-get install -y --allow-downgrades --allow-change-held-packages {pinned} "
                 f"&& apt-mark hold {moved} {removed}")


def test_a_repository_whose_key_is_not_the_pinned_one_is_refused_by_name_and_nothing_is_installed(node):
    host_ = node.host
    host_.wait_for("the golden container running", lambda: host_.golden() is not None, timeout=300)
    repositories = node.repositories
    packages = list(node.layer().packages())
    refused = next(iter(node.layer().repositories))
    quoted = " ".join(map(shlex.quote, packages))
    rc, out = host_.sh(f"systemctl stop {nodeboot.CONTAINER_UNIT} && apt-mark unhold {quoted} && dpkg --purge {quoted} "
                       "&& rm -f /etc/apt/sources.list.d/goldenenv-* /etc/apt/keyrings/goldenenv-* "
                       "/var/lib/goldenenv/host-layer-*.done")
    assert rc == 0 and not node.installed(packages), out
    repositories.pin({refused: repositories.other.fingerprint})
    try:
        script = node.script()
    finally:
        repositories.pin()
    host_.container.put_archive("/", emulated_host.tar_of({f"{nodeboot.SCRIPT_DIR}/host-layer.sh": (script, 0o755)}))
    before = len(node.requests())

    rc, _ = host_.sh(f"systemctl restart {nodeboot.HOST_LAYER_UNIT}")
    assert rc != 0
    url = f"https://{SERVED_AT}/{refused}/key.asc"
    journal = node.journal(nodeboot.HOST_LAYER_UNIT)
    assert (f"refusing repository {refused}: the key at {url} has fingerprint {repositories.key.fingerprint}, "
            f"not the pinned {repositories.other.fingerprint}") in journal, journal
    assert node.show(nodeboot.HOST_LAYER_UNIT, "ExecMainStatus") == "3"
    assert host_.units_state([nodeboot.HOST_LAYER_UNIT])[nodeboot.HOST_LAYER_UNIT] == "failed", "not retried"
    assert not node.installed(packages)
    assert host_.sh("ls /etc/apt/sources.list.d/goldenenv-* 2>/dev/null")[1].strip() == ""
    assert [r for r in node.requests()[before:] if "/key.asc " not in r] == [], "apt read no repository"

    host_.sh(f"systemctl start --no-block {nodeboot.CONTAINER_UNIT}")
    host_.wait_for("the golden container waiting for the host layer", lambda: (
        f"waiting for {nodeboot.HOST_LAYER_UNIT}" in node.journal(nodeboot.CONTAINER_UNIT)), timeout=60)
    assert host_.golden() is None

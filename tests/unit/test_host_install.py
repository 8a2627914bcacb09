"""The host layer's install step (goldenenv.images.hostinstall) for every shipped stack, and its unit in the nodes'
and the head's boot.

The script is valid bash, names every package of the host lock at its exact version and holds them; its key check
runs here in bash with gpg against keys the test makes: the pinned fingerprint passes, another key is refused
naming the repository, the key's URL and both fingerprints, and the keyring it writes holds the pinned key only.
Expected versions are read from the host lock, never typed here.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import gzip
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from goldenenv import nodeboot, slurm, stackconfig
from goldenenv.images import host, hostinstall
from goldenenv.images.lock import load
from goldenenv.plan import plan_config, stack_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shipped import pulumi_stacks  # noqa: E402

STACKS = [stack for _, stack in pulumi_stacks()]


def spec_of(stack: str):
    return stackconfig.load(stack, *stackconfig.namespaced(stackconfig.read_stack_file(stack_file(stack))))


def layers(stack: str) -> list[tuple[str, host.HostLayer]]:
    """(host, its layer): each pool's and the Slurm head's."""
    spec = spec_of(stack)
    found = [(pool.name, host.layer(spec, pool)) for pool in spec.nodes]
    return found + [("head", host.head_layer(spec))]


def installing(stack: str) -> list[tuple[str, host.HostLayer]]:
    return [(name, layer) for name, layer in layers(stack) if layer.installs]


def pinned(stack: str, layer: host.HostLayer) -> dict[str, str]:
    """What the host lock pins for the layer's components on its OS family, read from the lock's file."""
    lock = host.load_host(load(spec_of(stack).image.lock).host)
    return {package: version for name, _ in layer.install
            for package, version in lock.components[name].packages[layer.family].items()}


def test_the_shipped_stacks_install_a_host_layer_somewhere():
    """The rules below have something to hold: most shipped stacks' host images lack part of the layer."""
    assert sum(bool(installing(stack)) for stack in STACKS) >= len(STACKS) // 2


@pytest.mark.parametrize("stack", STACKS)
def test_the_install_script_is_bash_that_installs_and_holds_each_pinned_package_at_its_version(stack):
    for name, layer in installing(stack):
        script = hostinstall.install_script(layer)
        checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        assert checked.returncode == 0, f"{stack} {name}: {checked.stderr}"
        listed = next(line for line in script.splitlines() if line.strip().startswith("packages=("))
        words = shlex.split(listed.strip()[len("packages=("):-1])
        assert words == [f"{p}={v}" for p, v in pinned(stack, layer).items()], f"{stack} {name}"
        assert '--allow-downgrades --allow-change-held-packages --no-install-recommends "${packages[@]}"' in script
        assert 'apt-mark hold "${packages[@]%%=*}"' in script
        for repository in layer.repositories.values():
            assert shlex.quote(repository.fingerprint) in script and shlex.quote(repository.key_url) in script
        assert hostinstall.done_marker(layer) in script


@pytest.mark.parametrize("stack", STACKS)
def test_the_install_script_holds_no_secret_and_nothing_of_one_node(stack):
    """The same script bakes an image in `goldenenv host-image build`: nothing of one stack, node or account."""
    spec = spec_of(stack)
    for name, layer in installing(stack):
        script = hostinstall.install_script(layer)
        assert not re.search(r"PRIVATE KEY|AKIA[0-9A-Z]{16}|password|secret|token", script, re.I), (stack, name)
        assert spec.stack not in script and spec.region not in script, (stack, name)


def test_a_layer_with_nothing_to_install_has_no_script():
    spec = spec_of("aws-g5-dev")
    layer = host.layer(spec, spec.nodes[0])
    with pytest.raises(ValueError, match="nothing to install"):
        hostinstall.install_script(dataclasses.replace(layer, install=(), repositories={}))


# ---- the key check, run in bash with gpg ------------------------------------------------------------------------

def make_key(home: Path, uid: str) -> str:
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--yes"]
    subprocess.run([*gpg, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"], check=True,
                   capture_output=True)
    listed = subprocess.run([*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True)
    return next(line.split(":")[9] for line in listed.stdout.splitlines() if line.startswith("fpr:"))


def export(home: Path, fingerprint: str, path: Path) -> Path:
    key = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--armor", "--export", fingerprint],
                         check=True, capture_output=True).stdout
    path.write_bytes(key)
    return path


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("keys")
    vendor = make_key(folder / "vendor", "vendor <vendor@example.com>")
    other = make_key(folder / "other", "other <other@example.com>")
    both = folder / "both.asc"
    both.write_bytes(export(folder / "vendor", vendor, folder / "vendor.asc").read_bytes()
                     + export(folder / "other", other, folder / "other.asc").read_bytes())
    return {"vendor": vendor, "other": other, "folder": folder, "both": both}


def script_for(stack: str = "aws-g5-dev") -> tuple[host.HostLayer, str]:
    spec = spec_of(stack)
    layer = host.layer(spec, spec.nodes[0])
    return layer, hostinstall.install_script(layer)


def in_script(script: str, commands: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """`commands` run in bash after sourcing the script (which then only defines its functions)."""
    path = tmp_path / "host-layer.sh"
    path.write_text(script)
    gnupg = tmp_path / "gnupg"
    gnupg.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(["bash", "-c", f"source {shlex.quote(str(path))}; {commands}"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "GNUPGHOME": str(gnupg), **env}, timeout=60)


def test_the_key_check_passes_the_pinned_key_and_refuses_another_naming_both_fingerprints(keys, tmp_path):
    _, script = script_for()
    url = "https://download.example.com/linux/gpg"
    vendor_key = keys["folder"] / "vendor.asc"
    ok = in_script(script, f"check_key docker {url} {keys['vendor']} {vendor_key}", tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr

    refused = in_script(script, f"check_key docker {url} {keys['other']} {vendor_key}", tmp_path)
    assert refused.returncode == hostinstall.REFUSED
    assert (f"refusing repository docker: the key at {url} has fingerprint {keys['vendor']}, "
            f"not the pinned {keys['other']}") in refused.stdout

    garbage = tmp_path / "not-a-key.html"
    garbage.write_text("<html>404</html>")
    refused = in_script(script, f"check_key docker {url} {keys['vendor']} {garbage}", tmp_path)
    assert refused.returncode == hostinstall.REFUSED and "has fingerprint none" in refused.stdout


def test_the_keyring_written_for_a_repository_holds_only_the_pinned_key(keys, tmp_path):
    """A key file with more keys than the pinned one (or a vendor's rotated bundle): apt trusts the pinned one."""
    _, script = script_for()
    work = tmp_path / "work"
    work.mkdir()
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "curl").write_text(f"#!/bin/sh\nwhile [ \"$1\" != -o ]; do shift; done\ncp {keys['both']} \"$2\"\n")
    (stub / "curl").chmod(0o755)
    done = in_script(script, f"work={work}; key docker https://example.com/gpg {keys['vendor']}", tmp_path,
                     PATH=f"{stub}:/usr/bin:/bin")
    assert done.returncode == 0, done.stdout + done.stderr
    shown = subprocess.run(["gpg", "--batch", "--show-keys", "--with-colons", str(work / "docker.gpg")],
                           capture_output=True, text=True, env={"GNUPGHOME": str(tmp_path / "gnupg")})
    fingerprints = [line.split(":")[9] for line in shown.stdout.splitlines() if line.startswith("fpr:")]
    assert fingerprints == [keys["vendor"]], shown.stdout + shown.stderr

    unknown = "0" * 40
    refused = in_script(script, f"work={work}; key docker https://example.com/gpg {unknown}", tmp_path,
                        PATH=f"{stub}:/usr/bin:/bin")
    assert refused.returncode == hostinstall.REFUSED and f"not the pinned {unknown}" in refused.stdout


# ---- the unit in the boot ------------------------------------------------------------------------------------

def boot_units(stack: str) -> list[nodeboot.BootUnit]:
    spec = spec_of(stack)
    return nodeboot.NodeBoot(spec, spec.nodes[0].name, "none", False,
                             image_ref="registry.example.com/golden@sha256:" + "ab" * 32).units(None)


def unit_lines(unit: nodeboot.BootUnit) -> dict[str, str]:
    text = unit.unit.content
    if unit.unit.encoding == "gz+b64":
        text = gzip.decompress(base64.b64decode(text)).decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.mark.parametrize("stack", STACKS)
def test_the_host_layer_unit_runs_first_and_the_golden_container_waits_for_it(stack):
    spec = spec_of(stack)
    units = boot_units(stack)
    names = [u.name for u in units]
    if not host.layer(spec, spec.nodes[0]).installs:
        assert nodeboot.HOST_LAYER_UNIT not in names
        return
    first = units[0]
    assert first.name == nodeboot.HOST_LAYER_UNIT
    lines = unit_lines(first)
    assert lines["Before"].split() == ["docker.service", *names[1:]]
    assert lines["After"] == "network-online.target" and lines["Type"] == "oneshot"
    assert lines["RestartPreventExitStatus"] == str(hostinstall.REFUSED)
    assert first.script.encoding == "gz+b64"
    script = gzip.decompress(base64.b64decode(first.script.content)).decode()
    assert script == hostinstall.install_script(host.layer(spec, spec.nodes[0]),
                                                nodeboot.ready_marker(nodeboot.HOST_LAYER_UNIT))
    container = next(u for u in units if u.name == nodeboot.CONTAINER_UNIT)
    assert f"[ -e {shlex.quote(nodeboot.ready_marker(nodeboot.HOST_LAYER_UNIT))} ]" in container.script.content
    assert nodeboot.HOST_LAYER_UNIT in unit_lines(container)["After"].split()


def test_a_baked_layer_gets_no_install_unit(monkeypatch):
    """A host image baked with the layer (goldenenv host-image build) boots with nothing to install."""
    original = host.layer
    monkeypatch.setattr(host, "layer", lambda *a, **kw: dataclasses.replace(original(*a, **kw),
                                                                           baked="ami-0123456789abcdef0"))
    assert nodeboot.HOST_LAYER_UNIT not in [u.name for u in boot_units("aws-g5-dev")]


@pytest.mark.parametrize("stack", STACKS)
def test_the_heads_layer_installs_the_engine_without_the_gpu_parts(stack):
    spec = spec_of(stack)
    head = host.head_layer(spec)
    needs = {p.need for p in head.provided}
    assert host.ENGINE in needs and not needs & {host.DRIVER, host.TOOLKIT}


def test_the_heads_user_data_installs_its_layer_before_its_golden_container(monkeypatch):
    """The head as the plan renders it (HeadBoot): its own layer's install unit first, the container waiting."""
    stack = "aws-g5-dev"
    head = host.head_layer(spec_of(stack))
    assert head.installs, head.provided
    rendered = []
    original = nodeboot.user_data
    monkeypatch.setattr(nodeboot, "user_data", lambda spec, pool, files, hostname=None: rendered.append(
        (pool, files)) or original(spec, pool, files, hostname))
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    config["goldenenv:image"] = {**config["goldenenv:image"], "ref": "registry.example.com/g@sha256:" + "ab" * 32}
    plan_config(stack, config)
    files = {f.path: f for f in next(files for pool, files in rendered if pool == slurm.HEAD_HOSTNAME)}
    script = files[f"{nodeboot.SCRIPT_DIR}/host-layer.sh"]
    assert gzip.decompress(base64.b64decode(script.content)).decode() == hostinstall.install_script(
        head, nodeboot.ready_marker(nodeboot.HOST_LAYER_UNIT))
    container = files[f"{nodeboot.SCRIPT_DIR}/golden-image.sh"].content
    assert f"[ -e {shlex.quote(nodeboot.ready_marker(nodeboot.HOST_LAYER_UNIT))} ]" in container

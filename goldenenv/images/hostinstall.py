"""The install step of a host layer: one bash script, the same at a node's first boot and in a host image's bake.

`install_script(layer)` renders templates/node/host-layer.sh.j2 with every value computed here: each repository's
key URL and pinned fingerprint, its keyring and sources file, each package at its exact version, the kernel
modules. The script refuses a repository whose served key is not the pinned one before apt reads anything from it,
installs and holds every package at its version, loads the modules, and leaves a marker named after the layer's
digest, so later boots skip the install and a changed layer runs it again. Nothing in it is node-specific:
`goldenenv host-image build` runs the very same script on its build instance.
"""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv.images.host import ENGINE, HostLayer, Repository
from goldenenv.render import render

KEYRINGS = "/etc/apt/keyrings"
SOURCES = "/etc/apt/sources.list.d"
DONE_DIR = "/var/lib/goldenenv"
MODULES_LOAD = "/etc/modules-load.d/goldenenv-host-layer.conf"
"""The layer's modules, loaded by systemd-modules-load on every boot after (a baked image runs no install unit)."""
REFUSED = 3
"""The script's exit status when a repository's key is not the pinned one: the unit does not retry it."""


@dataclass(frozen=True)
class AptRepository:
    """One repository as the script meets it: where its key is and which fingerprint it must have; its source
    (url, suite, components), which the script writes to SOURCES/goldenenv-<name>.list with the key's keyring,
    KEYRINGS/goldenenv-<name>.gpg, as signed-by."""

    name: str
    key_url: str
    fingerprint: str
    source: str


def apt_repository(name: str, repository: Repository, family: str) -> AptRepository:
    source = repository.sources[family]
    return AptRepository(name, repository.key_url, repository.fingerprint,
                         " ".join([source.url, source.suite, *source.components]))


def done_marker(layer: HostLayer) -> str:
    return f"{DONE_DIR}/host-layer-{layer.digest}.done"


def install_script(layer: HostLayer, ready: str | None = None) -> str:
    """The layer's install step as a bash script; `ready`: a marker it leaves on every boot once the layer is there
    (a node's boot units wait for it), None where nothing waits (a bake)."""
    if not layer.install or layer.family is None:
        raise ValueError(f"host layer {layer.host_lock!r} ({layer.family}) has nothing to install")
    kernel = [(name, version) for _, component in layer.install
              for name, version in component.kernel_packages.get(layer.family, {}).items()]
    return render("node/host-layer.sh.j2",
                  repositories=[apt_repository(n, r, layer.family) for n, r in layer.repositories.items()],
                  packages=[f"{name}={version}" for name, version in layer.packages().items()],
                  kernel_packages=kernel, modules=layer.modules(),
                  done=done_marker(layer), ready=ready or "", modules_load=MODULES_LOAD, refused=REFUSED,
                  keyrings=KEYRINGS, sources=SOURCES,
                  engine=any(ENGINE in c.provides for _, c in layer.install))

"""What Google's GPUDirect-TCPX and GPUDirect-TCPXO fabrics share (goldenenv/fabrics/tcpx, tcpxo): the lock
section that pins the NCCL plugin with its receive-datapath manager, the registry Google publishes both from, and how
the image layer and a sidecar name their images. A module, not a folder: it is no fabric of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from goldenenv.fabrics.model import ReleaseTag, Sha256
from goldenenv.spec import Model

GPUDIRECT_REGISTRY = "us-docker.pkg.dev/gce-ai-infra"


class GpuDirectTcp(Model):
    """Google's GPUDirect-TCPX(O) NCCL plugin and the receive-datapath manager (RxDM) released with it: Google
    publishes them as a coupled pair (container-engine-accelerators gpudirect-tcpxo/README.md)."""

    plugin: ReleaseTag
    """The tag of nccl-plugin-gpudirecttcpx-dev (without v): the image layer copies the plugin from it."""
    rxdm: ReleaseTag
    """The tag of tcpgpudmarxd-dev (without v), the RxDM the node runs beside the golden container."""
    rxdm_digest: Sha256 | None = Field(default=None, exclude_if=lambda v: v is None)
    """The sha256 of that tag's image, where a public source gives it: the node then pulls RxDM by digest. None: by
    the tag alone (Google's release notes list tags only), which the node's RxDM unit says when it starts. Unset, it
    is left out of the lock's identity, so the image's tag stays what it was."""


def tcp_layer(repository: str, libraries: str) -> Callable[[GpuDirectTcp], dict[str, Any]]:
    """What the image layer renders: the plugin's image at the section's tag, and where the layer puts it."""
    return lambda section: {"image": f"{repository}:v{section.plugin}", "libraries": libraries}


def image(repository: str, tag: Callable[[Any], str], digest: Callable[[Any], str | None]) -> Callable[[Any], str]:
    """A sidecar's image reference from the lock's section: by tag, and by digest where the section pins one."""
    def ref(section: Any) -> str:
        pinned = digest(section)
        return f"{repository}:v{tag(section)}" + (f"@sha256:{pinned}" if pinned else "")
    return ref

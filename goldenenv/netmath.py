"""Address-space maths over CIDRs: how much of the public internet a set of sources admits.

One measure, shared by the stack file's validation (spec.py: network.adminCidrs) and the guardrail that judges
planned security groups (ssh-open-to-world), so a valid stack file never fails the rule. Plain functions over
``ipaddress``; it imports nothing of goldenenv.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

WIDEST_PUBLIC_PREFIX = {4: 8, 6: 32}
"""How much public space an admin (SSH) source may admit, counted over the union of every source: at most the
addresses of one IPv4 /8 and of one IPv6 /32 (PUBLIC_ALLOWANCE). IPv4: a /8 is the largest block ever allocated
to one organisation; anything more is a sizeable fraction of the internet, however it is split (two /8s, fifty
alternating /8s). IPv6: a /32 is the usual allocation to a whole ISP or RIR member; a site gets a /48 and an
office a /56 or /64, so a /32 already reaches far past one admin. spec.py's adminCidrs validation and
ssh-open-to-world both judge by this measure, so a valid stack file never fails the rule."""

PUBLIC_ALLOWANCE: Mapping[int, int] = {version: 2 ** ((32 if version == 4 else 128) - prefix)
                                       for version, prefix in WIDEST_PUBLIC_PREFIX.items()}
"""IP version -> the most public addresses a set of admin sources may admit together."""

NOT_PUBLIC: Mapping[int, tuple[Network, ...]] = {
    4: tuple(ipaddress.IPv4Network(n) for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
        "224.0.0.0/4", "240.0.0.0/4")),
    6: tuple(ipaddress.IPv6Network(n) for n in (
        "::/3", "4000::/2", "8000::/1",  # outside 2000::/3, the only IPv6 global unicast space
        "2001:db8::/32")),
}
"""Address space no one on the internet can source traffic from: IANA's special-purpose registries (private,
shared, loopback, link-local, documentation, benchmarking, multicast, reserved)."""

_SHORT_IPV4 = re.compile(r"^(\d{1,3})(\.\d{1,3}){0,2}(/\d{1,2})?$")


def parse_network(value: Any) -> Network | None:
    """A CIDR as the network it admits, or None when it is no network.

    Reads what a provider would: host bits set (10.0.0.1/8 is 10.0.0.0/8), a netmask (0.0.0.0/0.0.0.0), and the
    classful short forms with fewer than four octets, "0/0", "10/8", "172.16/12" (the missing octets are zeros).
    """
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return value
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        pass
    if _SHORT_IPV4.match(text):
        address, _, prefix = text.partition("/")
        octets = address.split(".")
        padded = ".".join(octets + ["0"] * (4 - len(octets)))
        try:
            return ipaddress.ip_network(f"{padded}/{prefix or 8 * len(octets)}", strict=False)
        except ValueError:
            return None
    return None


def cidr_union(cidrs: Iterable[Any]) -> list[Network]:
    """The networks together, collapsed per IP version (IPv4 first); values that are not CIDRs are skipped."""
    networks: dict[int, list[Network]] = {4: [], 6: []}
    for cidr in cidrs:
        net = parse_network(cidr)
        if net is not None:
            networks[net.version].append(net)
    return [n for version in (4, 6) for n in ipaddress.collapse_addresses(networks[version])]


def _minus(blocks: list[Network], excluded: Network) -> list[Network]:
    kept: list[Network] = []
    for block in blocks:
        if not block.overlaps(excluded):
            kept.append(block)
        elif excluded.subnet_of(block):
            kept.extend(block.address_exclude(excluded))
    return kept


def public_space(cidrs: Iterable[Any]) -> list[Network]:
    """The public part of the union of ``cidrs`` (NOT_PUBLIC taken out), collapsed, IPv4 first."""
    union = cidr_union(cidrs)
    public: list[Network] = []
    for version in (4, 6):
        blocks = [n for n in union if n.version == version]
        for excluded in NOT_PUBLIC[version]:
            blocks = _minus(blocks, excluded)
        public += ipaddress.collapse_addresses(blocks)
    return public


def public_addresses(cidrs: Iterable[Any]) -> dict[int, int]:
    """IP version -> how many public addresses the union of ``cidrs`` admits (each address counted once)."""
    counts = {4: 0, 6: 0}
    for block in public_space(cidrs):
        counts[block.version] += block.num_addresses
    return counts


def wide_public_blocks(cidrs: Iterable[Any]) -> list[Network]:
    """The public blocks of each IP version whose union admits more than PUBLIC_ALLOWANCE: empty when the set is
    narrow. The union is what counts, measured in addresses: 0.0.0.0/1 and 128.0.0.0/1 are each "not the world",
    together they are; fifty public /8s, none wider than a /8, admit fifty /8s' worth."""
    public = public_space(cidrs)
    counts = {4: 0, 6: 0}
    for block in public:
        counts[block.version] += block.num_addresses
    return [n for n in public if counts[n.version] > PUBLIC_ALLOWANCE[n.version]]


def _amount(count: int, version: int) -> str:
    """A number of addresses as a share of the internet's space, e.g. "50 /8s (19.5 % of IPv4)"."""
    whole = 2 ** (32 if version == 4 else 128)
    unit = WIDEST_PUBLIC_PREFIX[version]
    share = count / whole * 100
    return f"{count / PUBLIC_ALLOWANCE[version]:g} /{unit}s' worth ({share:.3g} % of IPv{version})"


def describe_wide(cidrs: Iterable[Any]) -> str | None:
    """Why a set of source CIDRs is too public ("together cover 0.0.0.0/0, ..."), or None when it is not."""
    union = cidr_union(cidrs)
    wide = wide_public_blocks(union)
    if not wide:
        return None
    shown = ", ".join(map(str, union[:6])) + (f" and {len(union) - 6} more" if len(union) > 6 else "")
    if any(n.prefixlen == 0 for n in union):
        return f"together cover {shown}: the whole internet"
    counts = public_addresses(union)
    over = "; ".join(f"IPv{v}: {_amount(counts[v], v)}" for v in (4, 6) if counts[v] > PUBLIC_ALLOWANCE[v])
    return (f"together cover {shown}, which admits more public addresses than one /{WIDEST_PUBLIC_PREFIX[4]} "
            f"(IPv4) or one /{WIDEST_PUBLIC_PREFIX[6]} (IPv6) ({over})")

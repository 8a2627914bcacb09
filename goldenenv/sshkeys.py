"""OpenSSH public keys as a stack file may give them (`nodes.sshPublicKey`): read, judged, never echoed.

A key is the one line of a `.pub` file: `TYPE BASE64 [comment]`. The base64 holds the key in SSH wire format
(RFC 4253 6.6, RFC 5656 3.1, RFC 8709 4): the type again, then the key's own fields, which are checked so a
truncated or mistyped key is refused here rather than by the cloud halfway through `up`. A private key pasted by
mistake is refused with a message that says so; no message here ever contains the text it was given.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

ED25519 = "ssh-ed25519"
RSA = "ssh-rsa"
ECDSA_CURVES = {"ecdsa-sha2-nistp256": "nistp256", "ecdsa-sha2-nistp384": "nistp384",
                "ecdsa-sha2-nistp521": "nistp521"}
KEY_TYPES = (ED25519, *ECDSA_CURVES, RSA)
"""The types goldenenv reads; each cloud says which of them it imports (clouds/<name>/nodes.py)."""
MIN_RSA_BITS = 2048
"""EC2 and ECS take 2048-bit RSA keys and longer; OpenSSH's ssh-keygen refuses to make shorter ones."""
MAX_KEY_CHARS = 8192
"""A 16384-bit RSA key is about 2,800 characters: anything longer is not one key."""
ED25519_BYTES = 32

_PRIVATE = re.compile(r"PRIVATE KEY|PuTTY-User-Key-File|b3BlbnNzaC1rZXktdjE")
"""PEM / OpenSSH private key armour, PuTTY's .ppk, and `openssh-key-v1` (the private key format) in base64."""
_COMMENT = re.compile(r"[\w .@:+=/,()-]{1,255}")
"""What a key's comment may hold (user@host, a date, a name): it reaches the cloud's API as data only."""
HOW = "paste the one line of your .pub file, e.g. 'ssh-ed25519 AAAA... you@laptop'"
_MAKE_ONE = "make a new key with `ssh-keygen -t ed25519`, or `-t rsa -b 4096` (every cloud imports RSA)"


class NotAPublicKey(ValueError):
    """The text is not an acceptable OpenSSH public key; the message says why, without quoting it."""


@dataclass(frozen=True)
class PublicKey:
    type: str
    blob: bytes
    comment: str = ""

    @property
    def line(self) -> str:
        """The key as one authorized_keys line, single-spaced."""
        text = f"{self.type} {base64.b64encode(self.blob).decode()}"
        return f"{text} {self.comment}" if self.comment else text

    @property
    def fingerprint(self) -> str:
        """SHA256:<base64, unpadded>, as `ssh-keygen -lf` prints it: safe to show, names the key."""
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")


def parse(text: str) -> PublicKey:
    """The public key on this line, or NotAPublicKey saying what is wrong and what to write instead."""
    if _PRIVATE.search(text):
        raise NotAPublicKey("this is a private key, which must never be in a stack file (it is shared and committed); "
                        "give the public key instead, the one line of the .pub file beside it (`ssh-keygen -y -f "
                        "KEYFILE` prints it), and treat this private key as exposed")
    if "BEGIN SSH2 PUBLIC KEY" in text:
        raise NotAPublicKey("an RFC 4716 (SSH2) public key; convert it to one OpenSSH line with "
                            "`ssh-keygen -i -f FILE`")
    if len(text) > MAX_KEY_CHARS:
        raise NotAPublicKey(f"{len(text):,} characters is not one public key (at most {MAX_KEY_CHARS:,}); {HOW}")
    line = text.strip()
    if not line:
        raise NotAPublicKey(f"is empty; {HOW}, or drop the key")
    if any(ord(c) < 32 or ord(c) == 127 for c in line):
        raise NotAPublicKey(f"must be one line (one key, no line breaks or control characters); {HOW}")
    kind, *rest = line.split()
    if kind not in KEY_TYPES:
        raise NotAPublicKey(_unaccepted(kind, rest))
    if not rest:
        raise NotAPublicKey(f"has no key after {kind}; {HOW}")
    try:
        blob = base64.b64decode(rest[0], validate=True)
    except (binascii.Error, ValueError):
        raise NotAPublicKey(f"the key after {kind} is not base64: copy the whole line of the .pub file") from None
    _check_blob(kind, blob)
    comment = " ".join(rest[1:])
    if comment and not _COMMENT.fullmatch(comment):
        raise NotAPublicKey("its comment may hold letters, digits, spaces and _ . @ : + = / , ( ) - (at most 255): "
                        "edit or drop the comment")
    return PublicKey(kind, blob, comment)


def _unaccepted(kind: str, rest: list[str]) -> str:
    accepted = ", ".join(KEY_TYPES)
    if kind.endswith("-cert-v01@openssh.com"):
        return f"an SSH certificate is not taken; give the plain public key ({accepted})"
    if kind == "ssh-dss":
        return f"DSA keys are not taken (OpenSSH turned them off); {_MAKE_ONE}; accepted: {accepted}"
    if kind.startswith("sk-"):
        return f"security-key (FIDO) keys are not imported by EC2 or ECS; {_MAKE_ONE}; accepted: {accepted}"
    if any(word in KEY_TYPES for word in rest):
        return ("starts with authorized_keys options (from=, command=, ...), which are not taken: give just the "
                "key, 'TYPE KEY [comment]'")
    return f"not an OpenSSH public key of an accepted type ({accepted}); {HOW}"


def _check_blob(kind: str, blob: bytes) -> None:
    """The wire-format fields of the key: its type again, then the key's own (RFC 4253, 5656, 8709)."""
    fields = _strings(blob)
    if fields is None or not fields or fields[0] != kind.encode():
        raise NotAPublicKey(f"the key's data is not a {kind} key (truncated or changed): copy the whole line of the "
                        ".pub file unchanged")
    body = fields[1:]
    if kind == ED25519:
        good = len(body) == 1 and len(body[0]) == ED25519_BYTES
    elif kind in ECDSA_CURVES:
        good = len(body) == 2 and body[0] == ECDSA_CURVES[kind].encode() and body[1][:1] == b"\x04"
    else:
        good = len(body) == 2 and bool(body[0].lstrip(b"\0")) and bool(body[1].lstrip(b"\0"))
        bits = int.from_bytes(body[1], "big").bit_length() if good else 0
        if good and bits < MIN_RSA_BITS:
            raise NotAPublicKey(f"an RSA key of {bits} bits; at least {MIN_RSA_BITS}: {_MAKE_ONE}")
    if not good:
        raise NotAPublicKey(f"the key's data is not a {kind} key (truncated or changed): copy the whole line of the "
                        ".pub file unchanged")


def _strings(blob: bytes) -> list[bytes] | None:
    """The blob as SSH `string`s (uint32 length, then that many bytes); None if it is not a whole number of them."""
    found, at = [], 0
    while at < len(blob):
        if at + 4 > len(blob):
            return None
        size = int.from_bytes(blob[at:at + 4], "big")
        at += 4
        if at + size > len(blob):
            return None
        found.append(blob[at:at + size])
        at += size
    return found

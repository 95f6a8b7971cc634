"""The admin SSH key: one OpenSSH public key line of a type Azure accepts for Linux VMs.

Azure takes RSA keys of at least 2048 bits and ED25519 keys for Linux VMs; ECDSA and DSA keys are refused
(Microsoft Learn, "Create and use an SSH public-private key pair for Linux VMs in Azure", section
"Supported SSH key formats": https://learn.microsoft.com/azure/virtual-machines/linux/mac-create-ssh-keys).
ndfleet sends exactly one key (osProfile.linuxConfiguration.ssh.publicKeys has one entry): several lines are
refused rather than glued into one keyData.

A private key pasted by mistake is named as such and never echoed, not even in part.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct

ACCEPTED_KEY_TYPES = ("ssh-rsa", "ssh-ed25519")
MIN_RSA_BITS = 2048
_REFUSED_KEY_TYPES = {
    "ecdsa-sha2-nistp256": "ECDSA",
    "ecdsa-sha2-nistp384": "ECDSA",
    "ecdsa-sha2-nistp521": "ECDSA",
    "sk-ecdsa-sha2-nistp256@openssh.com": "ECDSA (security key)",
    "sk-ssh-ed25519@openssh.com": "ED25519 security-key (FIDO)",
    "ssh-dss": "DSA",
}
SOURCE = "Microsoft Learn, 'Supported SSH key formats' (virtual-machines/linux/mac-create-ssh-keys)"

# The example key of the stacks in stacks/*.yaml (SHA256 fingerprint, as `ssh-keygen -lf` prints it). Nobody
# holds its private key, so a cluster deployed with it cannot be logged into: `ndfleet plan` warns and
# `pulumi up` refuses. The only place that knows the example key.
EXAMPLE_KEY_FINGERPRINTS = frozenset({"SHA256:WROBwTWwCl3jZjdr2MtLYNaZuPrsUm3l16mkJ8bhSg8"})


def looks_private(text: str) -> bool:
    """True for a PEM/OpenSSH private key block (or any part of one)."""
    return "PRIVATE KEY" in text or text.lstrip().startswith("-----BEGIN")


def fingerprint(key: str) -> str | None:
    """`SHA256:<base64>` of the key blob (what `ssh-keygen -lf key.pub` shows); None if the line has no blob."""
    parts = key.split()
    if len(parts) < 2:
        return None
    try:
        raw = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        return None
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def is_example_key(key: str) -> bool:
    return fingerprint(key) in EXAMPLE_KEY_FINGERPRINTS


def _fields(raw: bytes, count: int) -> list[bytes]:
    """The first `count` length-prefixed fields of an SSH wire-format blob (RFC 4253 section 6.6)."""
    out, at = [], 0
    for _ in range(count):
        (length,) = struct.unpack(">I", raw[at : at + 4])
        if at + 4 + length > len(raw):
            raise struct.error("field runs past the end")
        out.append(raw[at + 4 : at + 4 + length])
        at += 4 + length
    return out


# A public key blob is its fields and nothing more (RFC 4253 section 6.6: "ssh-rsa" carries string, mpint e,
# mpint n; RFC 8709 section 4: "ssh-ed25519" carries string, string of the 32-byte key). A key cut short by a bad
# paste loses its last field's bytes (or base64 padding); one with bytes past its fields is two keys run together.
_KEY_FIELDS = {"ssh-rsa": 3, "ssh-ed25519": 2}
ED25519_KEY_BYTES = 32
_CUT = "the key is cut short or damaged (a bad paste?): copy the whole line of the .pub file again"


def _blob_fields(raw: bytes, key_type: str) -> list[bytes]:
    count = _KEY_FIELDS[key_type]
    try:
        fields = _fields(raw, count)
    except struct.error:
        raise ValueError(f"the {key_type} key body ends before its last field: {_CUT}") from None
    used = sum(4 + len(f) for f in fields)
    if used != len(raw):
        raise ValueError(f"the {key_type} key body has {len(raw) - used} bytes past its end: {_CUT}")
    if key_type == "ssh-ed25519" and len(fields[1]) != ED25519_KEY_BYTES:
        raise ValueError(f"an ED25519 key is {ED25519_KEY_BYTES} bytes; this one has {len(fields[1])}: {_CUT}")
    return fields


def check_ssh_public_key(key: str) -> None:
    """Raise ValueError unless `key` is one OpenSSH public key line Azure accepts. Messages never contain the
    key's body (and nothing of a private key)."""
    text = key.strip()
    if looks_private(text):
        raise ValueError(
            "this is a PRIVATE key: give the public key, the one line of the .pub file "
            "(e.g. ~/.ssh/id_ed25519.pub), and treat this private key as exposed"
        )
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1:
        raise ValueError(
            f"holds {len(lines)} lines: give exactly one public key, on one line (ndfleet sends one key to Azure; "
            "add more users' keys after deployment)"
        )
    parts = text.split()
    if len(parts) < 2:
        raise ValueError(
            "must be an OpenSSH public key line: '<type> <base64> [comment]' (the contents of ~/.ssh/id_*.pub)"
        )
    key_type, blob = parts[0], parts[1]
    accepted = "use an RSA key of at least 2048 bits (ssh-rsa) or an ED25519 key (ssh-ed25519)"
    if key_type in _REFUSED_KEY_TYPES:
        raise ValueError(
            f"{_REFUSED_KEY_TYPES[key_type]} keys ({key_type}) are not accepted by Azure for Linux VMs: {accepted} "
            f"({SOURCE})"
        )
    if key_type not in ACCEPTED_KEY_TYPES:
        shown = key_type if len(key_type) <= 40 else key_type[:37] + "..."
        raise ValueError(f"key type {shown!r} is not accepted; {accepted}")
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        # Most often the line lost its end (base64 comes in groups of 4 characters, padded with '=').
        raise ValueError(f"the key body is not valid base64 OpenSSH key data: {_CUT}") from None
    try:
        embedded = _fields(raw, 1)[0].decode("ascii")
    except (struct.error, UnicodeDecodeError):
        raise ValueError(f"the key body is not valid base64 OpenSSH key data: {_CUT}") from None
    if embedded != key_type:
        raise ValueError(f"the key body says {embedded!r} but the line says {key_type!r}: the key is damaged")
    fields = _blob_fields(raw, key_type)
    if key_type == "ssh-rsa":
        bits = int.from_bytes(fields[2], "big").bit_length()
        if bits < MIN_RSA_BITS:
            raise ValueError(f"RSA keys must be at least {MIN_RSA_BITS} bits (Azure's minimum); this one has {bits}")

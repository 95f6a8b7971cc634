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
        embedded = _fields(raw, 1)[0].decode("ascii")
    except (binascii.Error, ValueError, struct.error, UnicodeDecodeError):
        raise ValueError("the key body is not valid base64 OpenSSH key data") from None
    if embedded != key_type:
        raise ValueError(f"the key body says {embedded!r} but the line says {key_type!r}: the key is damaged")
    if key_type == "ssh-rsa":
        try:
            _, _exponent, modulus = _fields(raw, 3)
        except struct.error:
            raise ValueError("the RSA key body is truncated: the key is damaged") from None
        bits = int.from_bytes(modulus, "big").bit_length()
        if bits < MIN_RSA_BITS:
            raise ValueError(f"RSA keys must be at least {MIN_RSA_BITS} bits (Azure's minimum); this one has {bits}")

"""A Slurm machine's VM userData: the controller's node-program bundle, then the Slurm configuration.

  userData = base64( [bundle] gzip( JSON {"version": release, "files": {path: text}} ) )

`bundle` (the Slurm controller only) is a node bundle (ndfleet/nodefiles/nodebundle.py, xz): the controller's
node-program library, which its customData's boot step (`ndfleet-unpack`, manifest `more_follows`) fetches once,
checks against the size and sha256 its customData names, and unpacks. What follows it is the Slurm configuration,
which `ndfleet-slurm-config` (templates/slurm/ndfleet-slurm-config.sh.j2) re-reads every few minutes: it skips the
manifest's `size` bytes and gunzips the rest. A login node's userData is the configuration alone.

Why the configuration is gzipped: the 103-island bench stack's is 22 KB as JSON, 4.9 KB gzipped, and beside the
controller's bundle (44 KB) the plain text would pass Azure's 64 KB. gzip (mtime 0, so the same stack gives the same
bytes) because the reader is shell and `gzip` is an Essential package of Debian and Ubuntu.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
from typing import Any

from ndfleet.nodefiles.nodebundle import MAX_UNPACKED_BYTES, USER_DATA_MAX_CHARS, BundleError, split


class UserDataError(ValueError):
    """A value that is not a Slurm machine's userData as `compose` writes it."""


def compose(config: dict[str, Any], bundle: bytes = b"") -> str:
    """The userData value: `bundle` (empty for a login node) followed by the gzipped configuration JSON."""
    text = json.dumps(config, sort_keys=True).encode()
    return base64.b64encode(bundle + gzip.compress(text, compresslevel=9, mtime=0)).decode()


def decompose(value: str) -> tuple[bytes, dict[str, Any]]:
    """A userData value -> (the bundle, b"" when there is none; the configuration: {"version", "files"}), each part
    checked by shape and bounded; UserDataError otherwise."""
    if len(value) > USER_DATA_MAX_CHARS:
        raise UserDataError(f"userData is longer than Azure's {USER_DATA_MAX_CHARS:,} characters")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise UserDataError("userData is not base64") from None
    bundle = b""
    if not raw.startswith(b"\x1f\x8b"):  # gzip's magic number (RFC 1952): anything else must begin with a bundle
        try:
            bundle, raw = split(raw)
        except BundleError as e:
            raise UserDataError(f"userData begins with neither the Slurm configuration nor a bundle: {e}") from None
    try:
        decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing
        text = decompressor.decompress(raw, MAX_UNPACKED_BYTES + 1)
        if len(text) > MAX_UNPACKED_BYTES or not decompressor.eof or decompressor.unused_data:
            raise UserDataError(f"the Slurm configuration is over {MAX_UNPACKED_BYTES:,} bytes, cut, or followed")
        doc = json.loads(text)
    except (zlib.error, ValueError, RecursionError) as e:
        if isinstance(e, UserDataError):
            raise
        raise UserDataError(f"the Slurm configuration is not gzipped JSON: {e}") from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise UserDataError("the Slurm configuration has no {path: text} 'files'")
    return bundle, doc


__all__ = ["UserDataError", "compose", "decompose"]

"""A Slurm machine's userData (ndfleet/slurm/userdata.py): the controller's library bundle, then the gzipped Slurm
configuration; a login node's is the configuration alone. Read back bounded and checked by shape: a value that is
not one ndfleet wrote is a named UserDataError, never a traceback (plan-diff reads plans from disk)."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from ndfleet.nodefiles import nodebundle
from ndfleet.nodefiles.machinefile import MachineFile
from ndfleet.slurm.userdata import UserDataError, compose, decompose

CONFIG = {"version": "25.11.0", "files": {"/etc/slurm/slurm.conf": "ClusterName=dev\n"}}


def _bundle() -> bytes:
    return nodebundle.pack([MachineFile("/usr/local/lib/ndfleet/ndfleet-node.zip", 0o644, b"PK\x03\x04 library")], [])


def test_the_bundle_and_the_configuration_come_back_apart() -> None:
    bundle = _bundle()
    assert decompose(compose(CONFIG, bundle)) == (bundle, CONFIG)
    assert decompose(compose(CONFIG)) == (b"", CONFIG)  # a login node


def test_a_node_bundle_reader_refuses_a_controller_user_data() -> None:
    # Otherwise plan-diff would read the library and miss the configuration after it.
    with pytest.raises(nodebundle.BundleError, match="after the bundle"):
        nodebundle.unpack(compose(CONFIG, _bundle()))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not base64!", "not base64"),
        (_b64(b"plain text"), "neither the Slurm configuration nor a bundle"),
        (_b64(_bundle()[:-8]), "neither the Slurm configuration nor a bundle"),
        (_b64(_bundle() + b"more"), "not gzipped JSON"),
        (_b64(gzip.compress(b"[1, 2]")), "no {path: text} 'files'"),
        (_b64(gzip.compress(json.dumps({"files": {"/a": 1}}).encode())), "no {path: text} 'files'"),
        (_b64(gzip.compress(b"{}") + b"trailing"), "followed"),
        (_b64(gzip.compress(b" " * (5 << 20))), "over 4,194,304 bytes"),  # a gzip bomb stops at the bound
        ("A" * 87_388, "longer than Azure's 87,384 characters"),
    ],
)
def test_what_ndfleet_did_not_write_is_a_named_error(value: str, message: str) -> None:
    with pytest.raises(UserDataError, match=message.replace("{", r"\{").replace("}", r"\}")):
        decompose(value)

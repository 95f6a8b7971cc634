"""The controller's node-program archive as its boot step writes it: from the head of its userData (the library
bundle, ndfleet/slurm/userdata.py), checked against the size and sha256 its customData's manifest names."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import yaml

from ndfleet.nodefiles import nodebundle
from ndfleet.slurm.machines import NODE_LIBRARY, machine_bootstrap, machine_user_data
from ndfleet.slurm.userdata import decompose
from ndfleet.stackconfig.clusterspec import ClusterSpec


def written_library(spec: ClusterSpec, folder: Path) -> Path:
    """Decode the archive as the controller's boot step does (the bundle the manifest names, unpacked) into `folder`;
    its path. Fails when the archive is in customData again, or when the manifest does not name the bundle."""
    cloud_config = yaml.safe_load(machine_bootstrap(spec, "controller").user_data)
    assert NODE_LIBRARY not in {f["path"] for f in cloud_config["write_files"]}, "the library is back in customData"
    written = {f["path"]: f["content"] for f in cloud_config["write_files"]}
    manifest = json.loads(written[nodebundle.MANIFEST_PATH])
    user_data = machine_user_data(spec, "controller")
    head = base64.b64decode(user_data)[: manifest["size"]]
    assert manifest["more_follows"] is True and hashlib.sha256(head).hexdigest() == manifest["sha256"]
    bundle, _ = decompose(user_data)
    files, activate = nodebundle.unpack(bundle)
    entry = next(f for f in files if f.path == NODE_LIBRARY)
    assert entry.mode == 0o644 and activate == []
    path = folder / Path(NODE_LIBRARY).name
    path.write_bytes(entry.data)
    return path


def library_modules(spec: ClusterSpec, folder: Path) -> set[str]:
    with zipfile.ZipFile(written_library(spec, folder)) as z:
        return set(z.namelist())

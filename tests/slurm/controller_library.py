"""The controller's node-program archive as cloud-init writes it from the controller's customData."""

from __future__ import annotations

import base64
import gzip
import zipfile
from pathlib import Path

import yaml

from ndfleet.nodefiles.bootstrap import RenderedBootstrap
from ndfleet.slurm.machines import NODE_LIBRARY


def written_library(rendered: RenderedBootstrap, folder: Path) -> Path:
    """Decode the archive's write_files entry as cloud-init does (`encoding: gz+b64`: base64, then gunzip;
    cloudinit.readthedocs.io/en/latest/reference/modules.html#write-files) into `folder`; its path."""
    entry = next(f for f in yaml.safe_load(rendered.user_data)["write_files"] if f["path"] == NODE_LIBRARY)
    assert entry["encoding"] == "gz+b64" and entry["permissions"] == "0644"
    path = folder / Path(NODE_LIBRARY).name
    path.write_bytes(gzip.decompress(base64.b64decode(entry["content"], validate=True)))
    return path


def library_modules(rendered: RenderedBootstrap, folder: Path) -> set[str]:
    with zipfile.ZipFile(written_library(rendered, folder)) as z:
        return set(z.namelist())

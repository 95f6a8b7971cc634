"""Every file each kind of machine of a stack receives, as `ndfleet render` writes them.

Machine kinds and where `ndfleet render --out DIR` puts their files:

  DIR/compute/              the compute nodes, when every island renders the same bootstrap
  DIR/compute/<island>/     one folder per island otherwise (each bootstrap names its island)
  DIR/slurm-controller/     the Slurm controller (with `ndfleet:scheduler: slurm`)
  DIR/slurm-login/          the Slurm login node(s): every login node receives the same files

Each folder holds `user-data` (the cloud-config customData decodes to), `custom-data.b64` (customData as Azure
receives it), `vm-user-data.b64` (the VM or scale-set userData, when the machine has one) and every file the machine
receives from either, under its name: the base name, a systemd drop-in as `<unit>.d-<name>`, and the controller's
node-program modules in `ndfleet-node.zip`. A compute node's userData is the node bundle
(ndfleet/nodefiles/nodebundle.py); a Slurm machine's is the Slurm release and configuration, on the controller after
its library bundle, which holds `ndfleet-node.zip` (ndfleet/slurm/userdata.py).
"""

from __future__ import annotations

import base64
import posixpath
from dataclasses import dataclass

from ndfleet.nodefiles.bootstrap import CUSTOM_DATA_MAX_BYTES, USER_DATA_MAX_BYTES
from ndfleet.prepare import PreparedCluster
from ndfleet.slurm.userdata import decompose

COMPUTE = "compute"
SLURM_ROLES = {"controller": "slurm-controller", "login": "slurm-login"}
RAW_FILES = ("user-data", "custom-data.b64", "vm-user-data.b64")  # the machine's inputs as they are


@dataclass(frozen=True)
class MachineFiles:
    kind: str  # "compute", "slurm-controller" or "slurm-login"
    folder: str  # relative to --out: "compute", "compute/ib00", "slurm-controller", ...
    label: str  # what the report calls it
    files: dict[str, tuple[bytes, int]]  # name (may hold "/" for a subfolder) -> (content, mode)
    custom_data_bytes: int  # decoded, against CUSTOM_DATA_MAX_BYTES
    user_data_bytes: int  # decoded, against USER_DATA_MAX_BYTES; 0: no userData
    # The node bundle in Key Vault parts (a Slurm stack's compute nodes): (its bytes, how many parts); (0, 0): none
    vault_bundle: tuple[int, int] = (0, 0)

    def sizes(self) -> str:
        text = f"customData {self.custom_data_bytes:,} of {CUSTOM_DATA_MAX_BYTES:,} bytes, " + (
            f"{CUSTOM_DATA_MAX_BYTES - self.custom_data_bytes:,} to spare"
        )
        if self.user_data_bytes:
            text += (
                f", userData {self.user_data_bytes:,} of {USER_DATA_MAX_BYTES:,} bytes, "
                f"{USER_DATA_MAX_BYTES - self.user_data_bytes:,} to spare"
            )
        if self.vault_bundle[1]:
            text += f", node bundle {self.vault_bundle[0]:,} bytes in {self.vault_bundle[1]} Key Vault parts"
        return text


def _compute(prepared: PreparedCluster) -> list[MachineFiles]:
    rendered = {p.island.name: p.bootstrap for p in prepared.islands}
    per_island = len({tuple(sorted(r.files.items())) for r in rendered.values()}) > 1
    machines = []
    for name, r in rendered.items():
        if per_island:
            folder, label = f"{COMPUTE}/{name}", f"compute island {name}"
        else:
            many = f"{len(rendered)} identical islands" if len(rendered) > 1 else f"island {name}"
            folder, label = COMPUTE, f"compute, {many}"
        vault = (len(r.bundle), len(r.bundle_parts)) if r.bundle_parts else (0, 0)
        machines.append(
            MachineFiles(COMPUTE, folder, label, r.output_files(), len(r.custom_data_bytes), r.user_data_bytes, vault)
        )
        if not per_island:
            break
    return machines


def _slurm(prepared: PreparedCluster) -> list[MachineFiles]:
    """The Slurm machines' files, from the boot data prepare rendered: what their VMs receive, not a second render."""
    spec = prepared.spec
    machines = []
    for machine in prepared.slurm_machines:
        role, kind = machine.role, SLURM_ROLES[machine.role]
        boot = machine.bootstrap
        files = boot.output_files()
        user_data = machine.user_data
        decoded = base64.b64decode(user_data)
        files["vm-user-data.b64"] = ((user_data + "\n").encode(), 0o644)
        for path, content in decompose(user_data)[1]["files"].items():
            name = posixpath.basename(path)
            if name in files:  # a name both customData and userData use: one would hide the other
                raise ValueError(f"Slurm {role}: userData file {path!r} has the name {name!r} of another file")
            files[name] = (content.encode(), 0o644)
        label = f"Slurm {role}" + (f" (each of {spec.slurm.login_count})" if role == "login" and spec.slurm else "")
        machines.append(MachineFiles(kind, kind, label, files, len(boot.custom_data_bytes), len(decoded)))
    return machines


def machine_files(prepared: PreparedCluster) -> list[MachineFiles]:
    """Every machine kind of the stack with every file it receives (module docstring)."""
    return [*_compute(prepared), *_slurm(prepared)]


__all__ = ["COMPUTE", "RAW_FILES", "SLURM_ROLES", "MachineFiles", "machine_files"]

"""The one shape of a file ndfleet places on a machine, whichever feature renders it and however it travels.

Every feature (the node bootstrap, Slurm, monitoring, the controller's node program) hands its files over as
`MachineFile`s: the path on the machine, the mode as an integer, the bytes. The carriers write them in their own
formats (cloud-init `write_files` with `permissions: '0644'`, the node bundle's JSON with `"mode": "0644"`,
`ndfleet render`'s folder) from this one shape, and features add to a node's bootstrap by returning
`BootstrapExtensions` that prepare merges in order (ndfleet/nodefiles/bootstrap.py, `merge_extensions`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

# What cloud-init's write_files and the node bundle accept: permission bits only (no setuid, setgid or sticky).
MODE_BITS = 0o777


def render_name(path: str) -> str:
    """The name `ndfleet render` writes a file under: its base name, or `<folder>-<name>` for a systemd drop-in
    (`slurmd.service.d/ndfleet.conf` -> `slurmd.service.d-ndfleet.conf`)."""
    folder, name = posixpath.split(path)
    parent = posixpath.basename(folder)
    return f"{parent}-{name}" if parent.endswith(".d") else name


@dataclass(frozen=True)
class MachineFile:
    path: str  # absolute, where the machine gets it
    mode: int  # permission bits, e.g. 0o644
    data: bytes
    name: str = ""  # what `ndfleet render` shows it as; "" -> render_name(path)

    def __post_init__(self) -> None:
        if not posixpath.isabs(self.path) or isinstance(self.mode, bool) or not isinstance(self.mode, int):
            raise ValueError(f"machine file {self.path!r}: needs an absolute path and an integer mode")
        if self.mode & ~MODE_BITS:
            raise ValueError(f"machine file {self.path!r}: mode {self.mode:o} has bits beyond {MODE_BITS:o}")
        if not self.name:
            object.__setattr__(self, "name", render_name(self.path))

    @classmethod
    def text(cls, path: str, mode: int, content: str, name: str = "") -> MachineFile:
        return cls(path, mode, content.encode(), name)

    @property
    def content(self) -> str:
        """The file as text (UTF-8): every file but the zipapp is."""
        return self.data.decode()

    @property
    def octal(self) -> str:
        """The mode as cloud-init and the node bundle write it: four octal digits, e.g. "0644"."""
        return f"{self.mode:04o}"


def unique_names(files: Iterable[MachineFile], what: str) -> None:
    """Refuse two files under one render name (one would hide the other in `ndfleet render`'s folder)."""
    seen: dict[str, str] = {}
    for f in files:
        if f.name in seen:
            raise ValueError(f"{what}: file {f.path!r}: its name {f.name!r} is taken by {seen[f.name]!r}")
        seen[f.name] = f.path


__all__ = ["MODE_BITS", "MachineFile", "render_name", "unique_names"]

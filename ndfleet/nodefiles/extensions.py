"""What optional features (Slurm, monitoring) add to a compute node's bootstrap without editing its templates:
files, units to enable and start, extra activation commands, node JSON sections, and where the bundle travels
(ndfleet/prepare.py `bootstrap_extensions` gathers them; ndfleet/nodefiles/bootstrap.py renders them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ndfleet.nodefiles.machinefile import MachineFile


@dataclass(frozen=True)
class BootstrapExtensions:
    """What other features add to a node's bootstrap without editing the templates (all empty by default)."""

    files: list[MachineFile] = field(default_factory=list)
    enable_units: list[str] = field(default_factory=list)
    start_units: list[str] = field(default_factory=list)
    runcmd: list[Any] = field(default_factory=list)
    node_sections: dict[str, Any] = field(default_factory=dict)
    # Where the bundle travels when not in userData: the scale set's tags naming the Key Vault that holds it in parts
    # and the identity that reads it ({"tag", "client_id_tag"}; nodebundle.manifest). Slurm's stacks have that vault.
    bundle_vault: dict[str, str] | None = None


def merge_extensions(parts: Sequence[BootstrapExtensions | None]) -> BootstrapExtensions | None:
    """Several features' additions as one, each list in the order given; None when no feature adds anything.
    Two features may not fill the same node JSON section (one would silently replace the other)."""
    given = [p for p in parts if p is not None]
    if not given:
        return None
    sections: dict[str, Any] = {}
    for part in given:
        taken = sections.keys() & part.node_sections.keys()
        if taken:
            raise ValueError(f"bootstrap extensions: node JSON section(s) {sorted(taken)} filled twice")
        sections.update(part.node_sections)
    return BootstrapExtensions(
        files=[f for p in given for f in p.files],
        enable_units=[u for p in given for u in p.enable_units],
        start_units=[u for p in given for u in p.start_units],
        runcmd=[c for p in given for c in p.runcmd],
        node_sections=sections,
        bundle_vault=next((p.bundle_vault for p in given if p.bundle_vault is not None), None),
    )


__all__ = ["BootstrapExtensions", "merge_extensions"]

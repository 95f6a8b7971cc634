"""The scontrol calls of the elastic programs, each bounded in time and output (ndfleet_node.runner)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ndfleet_node.runner import run_tool
from ndfleet_node.text import clip, decode

MAX_LIST_BYTES = 64 * 1024 * 1024
MAX_CALL_BYTES = 64 * 1024
BUSY_STATES = ("ALLOCATED", "MIXED", "COMPLETING")


class SlurmError(Exception):
    pass


@dataclass(frozen=True)
class SlurmNode:
    name: str
    states: tuple[str, ...]  # "IDLE", "DRAIN", "POWERING_UP", ...
    reason: str

    @property
    def powered_down(self) -> bool:
        return any(s in ("POWERED_DOWN", "POWERING_DOWN") for s in self.states)

    @property
    def busy(self) -> bool:
        return any(s in BUSY_STATES for s in self.states)


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """Nodes from `scontrol -o show node`: name, state flags and reason (the reason runs to the end of the line)."""
    out = {}
    for line in text.splitlines():
        fields: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
        name = fields.get("NodeName")
        if not name:
            continue
        reason = line.split(" Reason=", 1)[1].strip() if " Reason=" in line else ""
        out[name] = SlurmNode(name, tuple(fields.get("State", "").rstrip("*~#%!").split("+")), reason)
    return out


@dataclass
class Scontrol:
    argv: Sequence[str] = ("scontrol",)
    timeout_s: float = 30

    def call(self, *args: str, max_bytes: int = MAX_CALL_BYTES) -> str:
        result = run_tool([*self.argv, *args], self.timeout_s, max_output_bytes=max_bytes + 1)
        if not result.ok:
            raise SlurmError(f"scontrol {' '.join(args[:3])}: {clip(result.error, 300)}")
        if len(result.stdout) > max_bytes:
            raise SlurmError(f"scontrol {' '.join(args[:3])}: more than {max_bytes} bytes of output")
        return decode(result.stdout)

    def hostnames(self, hostlist: str) -> list[str]:
        return self.call("show", "hostnames", hostlist).split()

    def nodes(self) -> dict[str, SlurmNode]:
        return parse_nodes(self.call("show", "node", "--oneliner", max_bytes=MAX_LIST_BYTES))

    def update(self, nodes: Sequence[str], *settings: str) -> None:
        self.call("update", f"NodeName={','.join(nodes)}", *settings)

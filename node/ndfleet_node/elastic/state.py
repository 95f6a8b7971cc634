"""Which scale-set VM each elastic Slurm node runs on: a JSON file per island on the controller's state disk.

Slurm's node names are fixed (`<island>-<n>`); Azure names a Uniform scale set's VMs itself (instance ids, host
names ending in a base-36 id) and automatic repairs replace a VM by a new one. So the mapping is ndfleet's own: a
node is `pending` from the resume request until a VM of its island is claimed for it, then `instance`. Every change
is made under an exclusive lock (the resume, suspend, resume-fail programs and the reconcile timer run at once),
written to a temporary file and renamed into place.

A delete is recorded (`deleting`) before Azure is asked, and forgotten only once the instance list no longer has
the VM: a delete refused (409, 429, 5xx) or whose answer was lost is asked again by the reconcile timer until Azure
confirms it, so a node Slurm shows powered down never leaves a VM running (and billed) behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_STATE_BYTES = 4 * 1024 * 1024
# An elastic island's nodes are `<island>-<n>`, n from 1 (ndfleet/slurm/conf.py elastic_node_name). The one spelling
# of n is its ASCII digits without a leading zero: "gpu-01" and "gpu-001" are not "gpu-1" under other names, and a
# digit of another script ("gpu-\u0661", which str.isdigit accepts) is no number here.
_NODE_NAME = re.compile(r"(.+)-([1-9][0-9]{0,8})")


def island_and_index(name: str) -> tuple[str, int] | None:
    """A node name parsed once into its island and its number; None for a name not spelled the canonical way."""
    m = _NODE_NAME.fullmatch(name)
    return (m.group(1), int(m.group(2))) if m else None


@dataclass
class NodeEntry:
    instance_id: str = ""  # "" while pending
    computer_name: str = ""
    pending_since: float = 0.0  # when the resume asked for a VM (0: not pending)


@dataclass
class DeleteEntry:
    node: str = ""  # the node the VM ran for ("" for a VM no node claimed)
    why: str = ""
    since: float = 0.0  # when the delete was first asked for
    attempts: int = 0  # times Azure was asked
    accepted: bool = False  # Azure accepted it (202) at least once: waiting for the VM to leave the list
    error: str = ""  # the last refusal
    # The program that recorded it asks Azure itself (suspend, resume-fail); else the reconcile timer asks at once.
    caller_asks: bool = False


@dataclass
class IslandState:
    nodes: dict[str, NodeEntry] = field(default_factory=dict)
    # instance id -> when it was first seen with no node: a VM nobody asked for (a late VM of a failed resume)
    unclaimed_since: dict[str, float] = field(default_factory=dict)
    # job id -> the nodes resumed for it: held until they are burned in (docs/elastic.md)
    held_jobs: dict[str, list[str]] = field(default_factory=dict)
    # instance id -> a delete asked for and not yet confirmed by the instance list (module doc)
    deleting: dict[str, DeleteEntry] = field(default_factory=dict)

    def pending(self) -> list[str]:
        return sorted((n for n, e in self.nodes.items() if not e.instance_id), key=_natural)

    def claimed(self) -> set[str]:
        return {e.instance_id for e in self.nodes.values() if e.instance_id}


def _natural(name: str) -> tuple[str, int]:
    return island_and_index(name) or (name, -1)


def _load(path: Path) -> IslandState:
    if not path.exists():
        return IslandState()
    with path.open("rb") as f:
        data = f.read(MAX_STATE_BYTES + 1)
    if len(data) > MAX_STATE_BYTES:
        raise ValueError(f"{path}: over {MAX_STATE_BYTES} bytes")
    doc: Any = json.loads(data)
    return IslandState(
        nodes={k: NodeEntry(**v) for k, v in doc.get("nodes", {}).items()},
        unclaimed_since={str(k): float(v) for k, v in doc.get("unclaimed_since", {}).items()},
        held_jobs={str(k): list(v) for k, v in doc.get("held_jobs", {}).items()},
        deleting={str(k): DeleteEntry(**v) for k, v in doc.get("deleting", {}).items()},
    )


@contextlib.contextmanager
def island_lock(state_dir: Path, island: str, timeout_s: float = 120) -> Iterator[Path]:
    """`<state_dir>/<island>.lock` held for the block (flock, given up after `timeout_s`); yields the island's
    `<island>.json`. The elastic programs' state and the roll's (ndfleet_node/roll/state.py) are each kept so."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / f"{island}.json"
    with (state_dir / f"{island}.lock").open("a") as lock:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path}: locked by another program for {timeout_s:g} s") from None
                time.sleep(0.2)
        yield path


@contextlib.contextmanager
def island_state(state_dir: Path, island: str, timeout_s: float = 120) -> Iterator[IslandState]:
    """The island's state, locked; written back when the block ends without an exception."""
    with island_lock(state_dir, island, timeout_s) as path:
        state = _load(path)
        yield state
        doc = {
            "nodes": {k: asdict(v) for k, v in sorted(state.nodes.items())},
            "unclaimed_since": state.unclaimed_since,
            "held_jobs": state.held_jobs,
            "deleting": {k: asdict(v) for k, v in sorted(state.deleting.items())},
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        os.replace(tmp, path)

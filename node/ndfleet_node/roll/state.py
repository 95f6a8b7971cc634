"""A roll's state: one JSON file per island on the controller's state disk, beside the elastic programs' state, so a
roll survives a controller restart. Every change is made under an exclusive lock (the timer's pass and an operator's
`roll pause` may run at once), written to a temporary file and renamed into place, as elastic/state.py does."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ndfleet_node.elastic.state import island_lock

MAX_STATE_BYTES = 4 * 1024 * 1024
# A roll's status: running (batches go on), paused (the batch under way finishes, no new one starts), stopped (the
# gate: too many of a batch failed; nothing more is touched), aborted (by the operator), done.
STATUSES = ("running", "paused", "stopped", "aborted", "done")
# A node's phase in its batch.
DRAINING, UPGRADING, REIMAGING, RETURNING, DONE, FAILED = (
    "draining", "upgrading", "reimaging", "returning", "done", "failed")  # fmt: skip


@dataclass
class NodeRoll:
    phase: str = DRAINING
    instance_id: str = ""
    since: float = 0.0  # when the node entered its phase
    drained_at: float = 0.0
    operation: str = ""  # the Azure async operation of the phase under way
    requeued: list[str] = field(default_factory=list)  # jobs requeued after the deadline
    checks: list[str] = field(default_factory=list)  # why it failed: check ids, or roll.<what>
    target: str = ""  # the boot version it was rolled to
    reason_before: str = ""  # its Slurm reason when the reimage finished: a failure is a reason set after it


@dataclass
class RollState:
    roll_id: str
    island: str
    scale_set: str
    target: str  # the scale set model's boot version (names.TAG_BOOT_VERSION)
    batch: str = "1"  # N nodes, or P% of the island
    max_failed_pct: float = 20.0
    pause_s: float = 0.0
    min_available: int = 0
    deadline_s: float | None = None  # after a node's drain; None: wait for its jobs however long they run
    requeue: bool = False
    status: str = "running"
    why: str = ""  # what stopped it
    started: float = 0.0
    next_batch_at: float = 0.0
    current: dict[str, NodeRoll] = field(default_factory=dict)  # the batch under way
    batches: list[dict[str, Any]] = field(default_factory=list)  # finished: {"nodes", "failed": {node: checks}}
    failed: dict[str, list[str]] = field(default_factory=dict)  # node -> checks, every batch's, until rolled again
    failed_target: dict[str, str] = field(default_factory=dict)  # node -> the boot version it failed on
    rolled: list[str] = field(default_factory=list)  # nodes brought to `target`


def state_path(state_dir: Path, island: str) -> Path:
    return state_dir / f"{island}.json"


def load(path: Path) -> RollState | None:
    if not path.exists():
        return None
    with path.open("rb") as f:
        data = f.read(MAX_STATE_BYTES + 1)
    if len(data) > MAX_STATE_BYTES:
        raise ValueError(f"{path}: over {MAX_STATE_BYTES} bytes")
    doc: Any = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a JSON object")
    current = {str(k): NodeRoll(**v) for k, v in doc.pop("current", {}).items()}
    state = RollState(**doc, current=current)
    if state.status not in STATUSES:
        raise ValueError(f"{path}: status {state.status!r} is none of {', '.join(STATUSES)}")
    return state


def save(path: Path, state: RollState) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=1, sort_keys=True))
    os.replace(tmp, path)


def locked(state_dir: Path, island: str, timeout_s: float = 120) -> contextlib.AbstractContextManager[Path]:
    """The island's roll file, locked for the block (the elastic programs' lock, on the roll's own folder)."""
    return island_lock(state_dir, island, timeout_s)

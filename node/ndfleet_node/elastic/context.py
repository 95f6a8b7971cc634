"""The elastic programs' settings (/etc/ndfleet/elastic.json) and the context every program step runs in: the
island's scale set, the Slurm client, the clock and the log on the state disk."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ndfleet_node.elastic.arm import ArmError, ScaleSetApi
from ndfleet_node.elastic.state import island_and_index
from ndfleet_node.impact import IMDS, ImpactError, imds_instance, imds_token
from ndfleet_node.names import TAG_IDENTITY_CLIENT_ID
from ndfleet_node.scontrol import Scontrol, SlurmError

MAX_CONFIG_BYTES = 256 * 1024


MAX_LOG_BYTES = 4 * 1024 * 1024


# What one island's step may fail with; the other islands still get theirs, and the failure is reported.
FAILURES = (ArmError, ImpactError, SlurmError, TimeoutError, OSError, ValueError)


# The reconcile timer asks again for a delete under the island's lock, which the other programs wait for (120 s at
# most): its retries of one delete stay well within that.
RECONCILE_DELETE_BUDGET_S = 30.0


@dataclass(frozen=True)
class IslandSettings:
    name: str
    scale_set: str
    min_nodes: int
    max_nodes: int


@dataclass(frozen=True)
class Settings:
    islands: dict[str, IslandSettings]
    state_dir: Path
    claim_wait_s: float = 1800  # how long the resume program waits for new VMs to claim
    poll_s: float = 10
    unclaimed_grace_s: float = 900  # a VM nobody claims is deleted after this long
    # How long the suspend program retries a refused delete: within Slurm's SuspendTimeout (ndfleet/slurm/elastic.py)
    delete_budget_s: float = 480
    arm_endpoint: str = "https://management.azure.com"
    imds_endpoint: str = IMDS
    scontrol: tuple[str, ...] = ("scontrol",)
    scontrol_timeout_s: float = 30

    def island_of(self, node: str) -> IslandSettings | None:
        """The elastic island `node` belongs to; None for any other node (a fixed island's, the controller, a login
        node) and for a name not spelled `<island>-<n>` with n from 1 to maxNodes, no leading zero."""
        parsed = island_and_index(node)
        island = self.islands.get(parsed[0]) if parsed else None
        return island if parsed and island and parsed[1] <= island.max_nodes else None


def load_settings(path: Path) -> Settings:
    """/etc/ndfleet/elastic.json, rendered by ndfleet/slurm/machines.py into the controller's userData."""
    with path.open("rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{path}: over {MAX_CONFIG_BYTES} bytes")
    doc: dict[str, Any] = json.loads(data)
    islands = {
        name: IslandSettings(name, str(v["scaleSet"]), int(v["minNodes"]), int(v["maxNodes"]))
        for name, v in doc["islands"].items()
    }
    optional: dict[str, Any] = {k: doc[k] for k in ("claim_wait_s", "poll_s", "unclaimed_grace_s", "arm_endpoint",
                                    "imds_endpoint", "scontrol_timeout_s", "delete_budget_s") if k in doc}  # fmt: skip
    if "scontrol" in doc:
        optional["scontrol"] = tuple(doc["scontrol"])
    return Settings(islands=islands, state_dir=Path(doc["state_dir"]), **optional)


@dataclass
class Context:
    settings: Settings
    scale_set: Callable[[IslandSettings], ScaleSetApi]
    scontrol: Scontrol
    now: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    problems: list[str] = field(default_factory=list)

    def log(self, line: str, problem: bool = False) -> None:
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        print(f"ndfleet-elastic: {line}", file=sys.stderr)
        if problem:
            self.problems.append(line)
        append_log(self.settings.state_dir / "elastic.log", f"{stamp} {line}")


def append_log(path: Path, line: str) -> None:
    """One line onto a log on the state disk, kept to MAX_LOG_BYTES by moving it to `.log.1` first; a log that
    cannot be written is no reason to stop the program (the journal has the line too)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > MAX_LOG_BYTES:
            path.replace(path.with_suffix(".log.1"))
        with path.open("a") as f:
            f.write(f"{line}\n")
    except OSError:
        pass


def azure_scale_sets(settings: Settings) -> Callable[[IslandSettings], ScaleSetApi]:
    """Scale sets in this controller's subscription and resource group, with its managed identity's token."""
    instance = imds_instance(settings.imds_endpoint)
    parts = instance.resource_id.split("/")
    lower = [p.lower() for p in parts]
    if "resourcegroups" not in lower:
        raise ImpactError(f"instance metadata resource id {instance.resource_id!r} names no resource group")
    resource_group = parts[lower.index("resourcegroups") + 1]
    client_id = instance.tags.get(TAG_IDENTITY_CLIENT_ID, "")

    def token() -> str:
        return imds_token(settings.imds_endpoint, client_id)

    return lambda island: ScaleSetApi(
        instance.subscription_id, resource_group, island.scale_set, token, endpoint=settings.arm_endpoint
    )


def by_island(ctx: Context, nodes: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node in dict.fromkeys(nodes):
        island = ctx.settings.island_of(node)
        if island is None:
            ctx.log(f"{node} is not a node of an elastic island (<island>-<n>, n from 1 to maxNodes); ignored",
                    problem=True)
        else:
            out.setdefault(island.name, []).append(node)
    return out


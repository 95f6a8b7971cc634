"""`ndfleet-node setup`: prepare the node for validation and jobs. Idempotent: every step first checks whether
its work is done, so a reboot or a second run redoes nothing (a reboot only re-assembles and re-mounts).

Steps, in order: nvme (RAID0 of the local NVMe disks, XFS, mounted), nccl (/etc/nccl.conf), fabricmanager
(started and awaited), peermem (nvidia-peermem loaded and listed in modules-load.d), dcgm (started when
installed), blob (each container through BlobFuse2 with the managed identity; BlobFuse2 is installed first when the
image lacks it, setup/apt.py), lustre (when the stack has it).
Every tool call goes through the runner with the `setup_step` timeout; mounts are retried with backoff up to
`timeouts.mount_retry` seconds in all. A step that fails is logged and set-up carries on: the validator judges
the effect, and names the failed step in its check's message (the step results are in <state_dir>/setup.json).
Exit 0 when set-up ran (whatever its steps did), 2 when it could not run (node JSON unreadable).
Paths on the node are under $NDFLEET_SYSROOT (empty on a node; a fake tree in tests).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ndfleet_node import config as node_config
from ndfleet_node.report import write_atomic
from ndfleet_node.runner import Runner, ToolResult

SETUP_RESULTS = "setup.json"
SETUP_MARGIN_S = 30  # set-up stops retrying this long before its unit's TimeoutStartSec


class StepFailed(Exception):
    """A step could not do its work; the message says why."""


@dataclass
class SetupContext:
    config: node_config.NodeConfig
    runner: Runner
    sysroot: str = ""
    log: Callable[[str], None] = print
    sleep: Callable[[float], None] = time.sleep
    started: float = field(default_factory=time.monotonic)
    tags: dict[str, str] | None = None  # the scale set's tags, read once from the instance metadata
    _mount_deadline: float | None = None

    def path(self, p: str) -> str:
        return self.sysroot + p

    def run(self, *argv: str, env: Mapping[str, str] | None = None) -> ToolResult:
        return self.runner.run(list(argv), float(self.config.timeouts.get("setup_step", 120)), env=env)

    def must(self, *argv: str) -> ToolResult:
        r = self.run(*argv)
        if not r.ok:
            raise StepFailed(r.error)
        return r

    def read(self, p: str) -> str:
        try:
            with open(self.path(p), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def mounted(self, mountpoint: str) -> bool:
        lines = self.read("/proc/mounts").splitlines()
        return any(len(f) >= 2 and f[1] == mountpoint for f in (ln.split() for ln in lines))

    def unit_deadline(self) -> float:
        """When set-up must stop retrying: its unit's timeout less a margin (it reports a failure instead of being
        killed)."""
        return self.started + float(self.config.timeouts.get("setup", 600)) - SETUP_MARGIN_S

    def mount_deadline(self) -> float:
        """One deadline for every storage mount's retries: `mount_retry` seconds from the first mount attempt, and
        never later than the set-up unit's own deadline."""
        if self._mount_deadline is None:
            retry = time.monotonic() + float(self.config.timeouts.get("mount_retry", 240))
            self._mount_deadline = min(retry, self.unit_deadline())
        return self._mount_deadline

    def retry(self, what: str, attempt: Callable[[], ToolResult], done: Callable[[], bool]) -> str:
        """Call `attempt` until it succeeds, with backoff (1, 2, 4, ... 30 s) until the mount deadline."""
        deadline = self.mount_deadline()
        delay, tries = 1.0, 0
        while True:
            tries += 1
            r = attempt()
            if r.ok or done():
                return f"{what} (attempt {tries})"
            left = deadline - time.monotonic()
            if left <= 0 or r.timed_out:
                raise StepFailed(f"{what} failed after {tries} attempt(s): {r.error}")
            self.log(f"ndfleet-setup: {what}: attempt {tries} failed ({r.error}); retrying in {min(delay, left):.0f} s")
            self.sleep(min(delay, left))
            delay = min(delay * 2, 30.0)


Step = Callable[[SetupContext], str]


def steps() -> list[tuple[str, Step]]:
    from ndfleet_node.setup import storage, system

    return [
        ("nvme", system.setup_nvme),
        ("nccl", system.setup_nccl),
        ("fabricmanager", system.setup_fabricmanager),
        ("peermem", system.setup_peermem),
        ("dcgm", system.setup_dcgm),
        ("blob", storage.setup_blob),
        ("lustre", storage.setup_lustre),
    ]


def run_steps(ctx: SetupContext) -> list[dict[str, str]]:
    results = []
    for name, step in steps():
        ctx.log(f"ndfleet-setup: step {name}")
        try:
            message, status = step(ctx), "ok"
        except StepFailed as e:
            message, status = str(e), "failed"
        except Exception as e:  # noqa: BLE001 (one broken step must not stop the others)
            message, status = f"internal error: {type(e).__name__}: {e}", "failed"
        ctx.log(f"ndfleet-setup: {name}: {status}: {message}")
        results.append({"step": name, "status": status, "message": message})
    return results


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("setup", help="prepare this node (RAID0, NCCL, fabric manager, mounts)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--config", default=None, metavar="PATH", help=f"node JSON (default {node_config.DEFAULT_PATH})")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = node_config.load(args.config)
    except node_config.ConfigError as e:
        print(f"ndfleet-setup: cannot run: {e}", file=sys.stderr)
        return 2
    sysroot = os.environ.get("NDFLEET_SYSROOT", "").rstrip("/")
    ctx = SetupContext(cfg, Runner(), sysroot, log=lambda m: print(m, flush=True))
    results = run_steps(ctx)
    state_dir = ctx.path(str(cfg.paths.get("state_dir", "/run/ndfleet")))
    try:
        os.makedirs(state_dir, exist_ok=True)
        write_atomic(os.path.join(state_dir, SETUP_RESULTS), json.dumps({"steps": results}, ensure_ascii=True) + "\n")
    except OSError as e:
        print(f"ndfleet-setup: cannot write {state_dir}/{SETUP_RESULTS}: {e}", file=sys.stderr)
    failed = [r["step"] for r in results if r["status"] == "failed"]
    print("ndfleet-setup: done" + (f"; failed steps: {' '.join(failed)} (validate-node reports their effect)"
                                   if failed else ""), flush=True)  # fmt: skip
    return 0

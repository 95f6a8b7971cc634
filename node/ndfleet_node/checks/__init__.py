"""The validator's checks: one registry, shared facts, and the time budget.

A check is a function `(Context) -> Result` registered with `@check(id, level, calls=..., concurrent=...)`:
- `calls` lists the tool calls it may make as (timeout key, count): the key names an entry of the node JSON's
  `timeouts` table, the count is a number or the name of a hardware list (one call per IB device). The runner
  uses the same table for each call's timeout, and `budget_s` sums it, so the budget is not a guess.
- `concurrent=True` for read-only queries: they run in a thread pool; the others (bandwidth tests, which
  contend for the GPUs and HCAs) run one after another, after the concurrent ones.
Checks of the quick level are in QUICK_IDS order, then PERF_IDS; the node JSON names which run at each level.

Adding a check: write the function in the module of its family (gpu, ib, host, perf), decorate it, add its id
to QUICK_IDS or PERF_IDS, document it in docs/bootstrap.md, and add a fault to tests/fakes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ndfleet_node.config import NodeConfig
from ndfleet_node.runner import Runner, ToolResult

QUICK_IDS = (
    "gpu.count",
    "gpu.ecc",
    "gpu.row_remap",
    "gpu.xid",
    "gpu.nvlink",
    "gpu.fabricmanager",
    "gpu.pcie",
    "gpu.throttle",
    "ib.peermem",
    "ib.ports",
    "ib.rate",
    "ib.flap",
    "ib.pcie",
    "host.nvme",
    "host.memory",
    "host.cpu",
    "host.mounts",
)
PERF_IDS = ("perf.nccl_allreduce", "perf.ib_write_bw", "perf.nvbandwidth", "perf.dcgm")

T = TypeVar("T")


@dataclass(frozen=True)
class Result:
    status: str  # pass | fail | skip
    value: str
    expected: str
    message: str


def passed(value: str, expected: str, message: str) -> Result:
    return Result("pass", value, expected, message)


def failed(value: str, expected: str, message: str) -> Result:
    return Result("fail", value, expected, message)


def failed_list(problems: list[str], expected: str) -> Result:
    """A failure with one problem per device: value is the first, message all of them."""
    return Result("fail", problems[0], expected, "; ".join(problems))


@dataclass
class Context:
    config: NodeConfig
    runner: Runner
    sysroot: str = ""
    _facts: dict[str, Any] = field(default_factory=dict)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @property
    def hw(self) -> dict[str, Any]:
        return self.config.hardware

    @property
    def th(self) -> dict[str, Any]:
        return self.config.thresholds

    def timeout(self, key: str) -> float:
        return float(self.config.timeouts[key])

    def run(self, argv: list[str], key: str = "tool", env: dict[str, str] | None = None) -> ToolResult:
        return self.runner.run(argv, self.timeout(key), env=env)

    def once(self, key: str, compute: Callable[[], T]) -> T:
        """A fact shared by several checks (the nvidia-smi GPU table, ibstat), computed once per run."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._facts:
                self._facts[key] = compute()
            value: T = self._facts[key]
            return value

    def host_path(self, path: str) -> str:
        """A /proc or /sys path under $NDFLEET_SYSROOT."""
        return self.sysroot + path

    def read(self, path: str) -> str | None:
        try:
            with open(self.host_path(path), "rb") as f:
                return f.read(4 * 1024 * 1024).decode("utf-8", errors="replace")
        except OSError:
            return None


CheckFn = Callable[[Context], Result]
Calls = tuple[tuple[str, int | str], ...]


@dataclass(frozen=True)
class Check:
    id: str
    fn: CheckFn
    calls: Calls
    concurrent: bool


REGISTRY: dict[str, Check] = {}


def check(check_id: str, calls: Calls = (), concurrent: bool = True) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        REGISTRY[check_id] = Check(check_id, fn, calls, concurrent)
        return fn

    return register


def load_all() -> dict[str, Check]:
    from ndfleet_node.checks import gpu, host, ib, perf  # noqa: F401 (registers the checks)

    return REGISTRY


def check_budget_s(c: Check, config: NodeConfig) -> float:
    total = 0.0
    for key, count in c.calls:
        n = len(config.hardware.get(count, [])) if isinstance(count, str) else count
        total += float(config.timeouts.get(key, 0)) * n
    return total


def budget_s(config: NodeConfig, level: str) -> float:
    """Longest the checks of `level` can take: every call of every check at its timeout, one after another."""
    checks = load_all()
    return sum(check_budget_s(checks[i], config) for i in config.levels().get(level, []) if i in checks)


def sysroot() -> str:
    return os.environ.get("NDFLEET_SYSROOT", "").rstrip("/")

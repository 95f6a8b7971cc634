"""The validator's checks: one registry, shared facts, and the time budget.

A check is a function `(Context) -> Result` registered with `@check(id, level, impact, calls=..., concurrent=...,
setup_steps=...)`, which holds everything known about a check in one place:
- `level`: the first level that runs it ("quick": read-only queries; "epilog": also the short measured floor the
  Slurm Epilog runs at each job's end, the 8-GPU all-reduce; "full": also every other bandwidth test).
- `impact`: the Guest Health Reporting category a failure files under (suffix of Resource.Hpc.Unhealthy.), or None
  where the fault is software or configuration (ndfleet_node.impact_categories).
- `setup_steps`: set-up steps whose failure explains this check's (ndfleet_node.validate).
- `calls` lists the tool calls it may make as (timeout key, count): the key names an entry of the node JSON's
  `timeouts` table, the count is a number or the name of a hardware list (one call per IB device). The runner
  uses the same table for each call's timeout, and `budget_s` sums it, so the budget is not a guess.
- `concurrent=True` for read-only queries: they run in a thread pool; the others (bandwidth tests, which
  contend for the GPUs and HCAs) run one after another, after the concurrent ones.
Checks run in registration order (families gpu, ib, host, perf; each in its file's order); the node JSON names
which run at each level (`level_ids`).

Adding a check: write the function in the module of its family (gpu, ib, host, perf), decorate it, document it
in docs/bootstrap.md, and add a fault to tests/fakes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ndfleet_node.config import Hardware, NodeConfig, Thresholds
from ndfleet_node.runner import Runner, ToolResult

# The levels, in run order: a level runs its own checks after those of the levels before it.
LEVELS = ("quick", "epilog", "full")

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
    def hw(self) -> Hardware:
        return self.config.hardware

    @property
    def th(self) -> Thresholds:
        return self.config.thresholds

    def timeout(self, key: str) -> float:
        return float(self.config.timeouts[key])

    def run(self, argv: list[str], key: str = "tool", env: dict[str, str] | None = None,
            clear_prefixes: tuple[str, ...] = ()) -> ToolResult:
        return self.runner.run(argv, self.timeout(key), env=env, clear_prefixes=clear_prefixes)

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
    level: str
    impact: str | None
    setup_steps: tuple[str, ...]


REGISTRY: dict[str, Check] = {}


def check(
    check_id: str, level: str, impact: str | None, calls: Calls = (), concurrent: bool = True,
    setup_steps: tuple[str, ...] = (),
) -> Callable[[CheckFn], CheckFn]:  # fmt: skip
    def register(fn: CheckFn) -> CheckFn:
        REGISTRY[check_id] = Check(check_id, fn, calls, concurrent, level, impact, setup_steps)
        return fn

    return register


def load_all() -> dict[str, Check]:
    """Every check, in run and report order: by module (gpu, ib, host, perf), then as each module defines them;
    whichever module Python happened to import first does not matter."""
    from ndfleet_node.checks import gpu, ib, host, perf  # noqa: I001 (registers the checks)

    modules = [m.__name__ for m in (gpu, ib, host, perf)]
    ordered = sorted(enumerate(REGISTRY.values()), key=lambda item: (modules.index(item[1].fn.__module__), item[0]))
    return {c.id: c for _, c in ordered}


def level_ids(level: str) -> list[str]:
    """The ids a level runs: its own checks and those of the levels before it, in run order."""
    upto = LEVELS[: LEVELS.index(level) + 1]
    return [c.id for c in load_all().values() if c.level in upto]


def check_budget_s(c: Check, config: NodeConfig) -> float:
    total = 0.0
    for key, count in c.calls:
        n = len(getattr(config.hardware, count)) if isinstance(count, str) else count
        total += float(config.timeouts.get(key, 0)) * n
    return total


def budget_s(config: NodeConfig, level: str) -> float:
    """Longest the checks of `level` can take: every call of every check at its timeout, one after another."""
    checks = load_all()
    return sum(check_budget_s(checks[i], config) for i in config.levels().get(level, []) if i in checks)


def sysroot() -> str:
    return os.environ.get("NDFLEET_SYSROOT", "").rstrip("/")

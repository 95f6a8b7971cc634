"""Which tests to run next, and what their results say about each host: pure logic, no processes.

Rounds (every host in at most one test per round, so a round's tests run in parallel):

1. **pairwise**: every host in one 2-node test. Partners are half an island apart (host i with host i + n/2 in
   hostfile order), so pairs cross the fabric rather than sharing a leaf switch; an odd host out waits for a
   known-good partner in the next round.
2. **re-pairing**, repeated while needed: each *suspect* (a host that failed a test and never passed one) is paired
   with a *known-good* host (one that passed a test) it has not been paired with yet. A pass clears the suspect;
   a failure pins it. Suspects left without a known-good partner (none yet, or more suspects than known-good
   hosts) are paired with each other, which clears the good ones among them.
3. **island**: one all_reduce across every host that is not unhealthy, against the island floor.

Verdicts:

- a host that passed any test is **healthy**: a test passes only when its busbw clears the floor, nothing hung
  and nccl-tests found no wrong results, and one bad host would have failed the whole test;
- a host is **unhealthy** when it failed tests with at least two different partners and at least one of those
  failed tests had only known-good partners (so the failure cannot be the partner's);
- a host that could not be cleared or pinned (no partner left to try, or the round limit) stays **suspect**.

The reason of an unhealthy host is the worst failure kind among its failed tests with known-good partners: hang,
wrong results, an unreadable result (nan, inf or garbage where a figure belongs), launch error, then low
bandwidth.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Phase = Literal["pairwise", "repair", "island", "done"]
Outcome = Literal["pass", "slow", "hang", "wrong", "unreadable", "error"]
Status = Literal["healthy", "unhealthy", "suspect", "untested"]

# Worst first: the reason given for a host whose failed tests failed in different ways.
_SEVERITY: tuple[Outcome, ...] = ("hang", "wrong", "unreadable", "error", "slow")
REASONS: dict[Outcome, str] = {
    "hang": "hang",
    "wrong": "wrong-results",
    # nccl-tests printed a figure that is not one (nan, inf, garbage): never a pass, never compared with a floor.
    "unreadable": "unreadable-result",
    "error": "launch-error",
    "slow": "busbw-below-floor",
}


@dataclass(frozen=True)
class TestSpec:
    """One all_reduce_perf run over `hosts` (a pair, or the whole island)."""

    __test__ = False  # not a pytest test class

    id: str
    round: int
    phase: Phase
    hosts: tuple[str, ...]
    floor_gbps: float


@dataclass(frozen=True)
class TestResult:
    __test__ = False  # not a pytest test class

    test: TestSpec
    outcome: Outcome
    busbw_gbps: float | None = None
    wrong: int = 0
    message: str = ""
    duration_s: float = 0.0


@dataclass
class HostVerdict:
    host: str
    status: Status
    reason: str = ""
    partners_failed: list[str] = field(default_factory=list)
    partners_passed: list[str] = field(default_factory=list)
    busbw_gbps: list[float] = field(default_factory=list)  # every test's busbw this host took part in


class Planner:
    """Drives the rounds: `next_round()` gives the tests to run, `record()` takes their results."""

    def __init__(self, hosts: Sequence[str], pair_floor_gbps: float, island_floor_gbps: float, max_rounds: int = 8):
        if len(set(hosts)) != len(hosts):
            dupes = sorted({h for h in hosts if hosts.count(h) > 1})
            raise ValueError(f"hosts listed more than once: {', '.join(dupes)}")
        if len(hosts) < 2:
            raise ValueError(f"burn-in needs at least 2 hosts, got {len(hosts)}")
        self.hosts: tuple[str, ...] = tuple(hosts)
        self.pair_floor = pair_floor_gbps
        self.island_floor = island_floor_gbps
        self.max_rounds = max_rounds
        self.phase: Phase = "pairwise"
        self.round = 0
        self.results: list[TestResult] = []
        self.island_result: TestResult | None = None
        self._tried: dict[str, set[str]] = {h: set() for h in hosts}  # partners each host was tested with

    # ------------------------------------------------------------------ facts from the results so far

    def known_good(self) -> set[str]:
        return {h for r in self.results if r.outcome == "pass" and r.test.phase != "island" for h in r.test.hosts}

    def _failures(self, host: str) -> list[TestResult]:
        return [r for r in self.results if r.outcome != "pass" and host in r.test.hosts and r.test.phase != "island"]

    def unhealthy(self) -> set[str]:
        good = self.known_good()
        bad = set()
        for host in self.hosts:
            if host in good:
                continue
            failures = self._failures(host)
            partners = {p for r in failures for p in r.test.hosts if p != host}
            confirmed = any(all(p in good for p in r.test.hosts if p != host) for r in failures)
            if len(partners) >= 2 and confirmed:
                bad.add(host)
        return bad

    def suspects(self) -> list[str]:
        """Hosts still to be cleared or pinned: failed (or never tested) and neither good nor unhealthy."""
        good, bad = self.known_good(), self.unhealthy()
        return [h for h in self.hosts if h not in good and h not in bad]

    # ------------------------------------------------------------------ planning

    def next_round(self) -> list[TestSpec]:
        """The next round's tests, or [] when the burn-in is over."""
        while self.phase != "done":
            if self.round >= self.max_rounds and self.phase != "island":
                self.phase = "island"
            if self.phase == "pairwise":
                tests = self._pairwise()
                self.phase = "repair"
            elif self.phase == "repair":
                tests = self._repair()
                if not tests:
                    self.phase = "island"
                    continue
            else:  # island
                self.phase = "done"
                tests = self._island()
            if tests:
                self.round += 1
                tag = f"r{self.round}"
                return [TestSpec(t.id.replace("r?", tag, 1), self.round, t.phase, t.hosts, t.floor_gbps) for t in tests]
        return []

    def _pair(self, a: str, b: str, phase: Phase) -> TestSpec:
        return TestSpec(f"r?-{a}+{b}", 0, phase, (a, b), self.pair_floor)  # r? becomes the round number

    def _pairwise(self) -> list[TestSpec]:
        n = len(self.hosts)
        half = n // 2
        # host i with host i + n/2: partners far apart in instance order; with an odd count the last host waits.
        return [self._pair(self.hosts[i], self.hosts[i + half], "pairwise") for i in range(half)]

    def _repair(self) -> list[TestSpec]:
        suspects = self.suspects()
        if not suspects:
            return []
        good = sorted(self.known_good(), key=self.hosts.index)
        tests: list[TestSpec] = []
        busy: set[str] = set()
        # Suspects with the most evidence against them first; each gets a known-good partner it has not had.
        for s in sorted(suspects, key=lambda h: (-len(self._failures(h)), self.hosts.index(h))):
            partner = next((g for g in good if g not in busy and g not in self._tried[s]), None)
            if partner is not None:
                tests.append(self._pair(s, partner, "repair"))
                busy.update((s, partner))
        # Suspects left without a known-good partner (none yet, or fewer than suspects): pair them with each other
        # (new partners only). A pass clears both; a failure counts only once a known-good partner confirms it.
        free = [s for s in suspects if s not in busy]
        while free:
            s = free.pop(0)
            partner = next((p for p in free if p not in self._tried[s]), None)
            if partner is not None:
                free.remove(partner)
                tests.append(self._pair(s, partner, "repair"))
        return tests

    def _island(self) -> list[TestSpec]:
        members = tuple(h for h in self.hosts if h in self.known_good())
        if len(members) < 3:  # two hosts: the pair test already was the island test
            return []
        return [TestSpec("r?-island", 0, "island", members, self.island_floor)]

    # ------------------------------------------------------------------ results

    def record(self, results: Iterable[TestResult]) -> None:
        for r in results:
            if r.test.phase == "island":
                self.island_result = r
                continue
            self.results.append(r)
            a, b = r.test.hosts[0], r.test.hosts[-1]
            self._tried[a].add(b)
            self._tried[b].add(a)

    def verdicts(self) -> dict[str, HostVerdict]:
        good, bad = self.known_good(), self.unhealthy()
        out: dict[str, HostVerdict] = {}
        for host in self.hosts:
            mine = [r for r in self.results if host in r.test.hosts]
            failed = [r for r in mine if r.outcome != "pass"]
            verdict = HostVerdict(
                host=host,
                status="untested",
                partners_failed=[p for r in failed for p in r.test.hosts if p != host],
                partners_passed=[p for r in mine if r.outcome == "pass" for p in r.test.hosts if p != host],
                busbw_gbps=[r.busbw_gbps for r in mine if r.busbw_gbps is not None],
            )
            if host in good:
                verdict.status = "healthy"
            elif host in bad:
                verdict.status = "unhealthy"
                # The reason comes from the tests whose partners were all known-good: a first-round failure
                # may have been the partner's fault (a slow host paired with one that hangs looks hung).
                confirmed = [r for r in failed if all(p in good for p in r.test.hosts if p != host)]
                verdict.reason = worst_reason(r.outcome for r in confirmed or failed)
            elif failed:
                verdict.status = "suspect"
                verdict.reason = "not-pinned: " + worst_reason(r.outcome for r in failed)
            out[host] = verdict
        return out


def worst_reason(outcomes: Iterable[Outcome]) -> str:
    seen = set(outcomes)
    for kind in _SEVERITY:
        if kind in seen:
            return REASONS[kind]
    return ""

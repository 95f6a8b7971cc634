"""The planner alone: rounds and verdicts from given results (no processes), table-driven over fault sets."""

from __future__ import annotations

import pytest
from ndfleet_node.burnin.planner import Planner, TestResult, TestSpec

PAIR, ISLAND = 340.0, 400.0


def simulate(n: int, bad: dict[str, str], max_rounds: int = 8) -> Planner:
    """Run the planner to the end over a fleet where `bad` maps host -> failure kind (slow/hang/wrong)."""
    hosts = [f"h{i:03d}" for i in range(n)]
    planner = Planner(hosts, PAIR, ISLAND, max_rounds)
    severity = ["hang", "wrong", "slow"]
    while tests := planner.next_round():
        results = []
        for t in tests:
            kinds = sorted((bad[h] for h in t.hosts if h in bad), key=severity.index)
            outcome = kinds[0] if kinds else "pass"
            results.append(TestResult(t, outcome, 380.0 if outcome == "pass" else 150.0))  # type: ignore[arg-type]
        planner.record(results)
    return planner


def rounds_in_phase(planner: Planner) -> list[str]:
    seen: dict[int, str] = {r.test.round: r.test.phase for r in planner.results}
    if planner.island_result:
        seen[planner.island_result.test.round] = "island"
    return [seen[k] for k in sorted(seen)]


@pytest.mark.parametrize(
    ("n", "bad"),
    [
        (2, {}),
        (16, {}),
        (16, {"h003": "slow"}),
        (16, {"h000": "slow", "h008": "slow"}),  # same first-round pair
        (16, {"h000": "slow", "h001": "hang", "h002": "wrong", "h003": "slow", "h004": "slow"}),
        (100, {f"h{i:03d}": "slow" for i in (1, 17, 50, 51, 99)}),
        (300, {f"h{i:03d}": k for i, k in ((0, "slow"), (150, "hang"), (7, "wrong"), (8, "slow"), (299, "slow"))}),
        (4, {"h000": "slow", "h001": "slow"}),  # every first-round pair fails: cross-pairing finds good hosts
        (9, {"h008": "slow"}),
    ],
)
def test_pins_exactly_the_bad_hosts(n: int, bad: dict[str, str]) -> None:
    planner = simulate(n, bad)
    verdicts = planner.verdicts()
    assert {h for h, v in verdicts.items() if v.status == "unhealthy"} == set(bad)
    assert all(v.status == "healthy" for h, v in verdicts.items() if h not in bad)
    expected = {"slow": "busbw-below-floor", "hang": "hang", "wrong": "wrong-results"}
    assert {h: verdicts[h].reason for h in bad} == {h: expected[k] for h, k in bad.items()}


def test_every_round_uses_each_host_at_most_once() -> None:
    planner = Planner([f"h{i}" for i in range(10)], PAIR, ISLAND)
    tests = planner.next_round()
    hosts = [h for t in tests for h in t.hosts]
    assert len(hosts) == len(set(hosts)) == 10
    assert [t.hosts for t in tests] == [("h0", "h5"), ("h1", "h6"), ("h2", "h7"), ("h3", "h8"), ("h4", "h9")]
    assert all(t.floor_gbps == PAIR and t.phase == "pairwise" for t in tests)


def test_healthy_island_takes_two_rounds_and_few_bad_hosts_three() -> None:
    assert rounds_in_phase(simulate(100, {})) == ["pairwise", "island"]
    bad = {f"h{i:03d}": "slow" for i in (3, 40, 77)}
    assert rounds_in_phase(simulate(100, bad)) == ["pairwise", "repair", "island"]


def test_two_hosts_one_bad_cannot_be_pinned() -> None:
    planner = simulate(2, {"h000": "slow"})
    verdicts = planner.verdicts()
    assert {v.status for v in verdicts.values()} == {"suspect"}
    assert verdicts["h000"].reason == "not-pinned: busbw-below-floor"
    assert planner.island_result is None


def test_round_limit_leaves_suspects_not_unhealthy() -> None:
    # 3 of 4 bad: both first-round pairs fail, both cross-pairs fail, and the limit stops further rounds.
    planner = simulate(4, {"h000": "slow", "h001": "slow", "h002": "slow"}, max_rounds=2)
    assert {h: v.status for h, v in planner.verdicts().items()} == dict.fromkeys(planner.hosts, "suspect")
    assert planner.round == 2 and planner.island_result is None


def test_island_test_covers_every_healthy_host_at_the_island_floor() -> None:
    planner = simulate(12, {"h004": "hang"})
    assert planner.island_result is not None
    spec: TestSpec = planner.island_result.test
    assert spec.floor_gbps == ISLAND and len(spec.hosts) == 11 and "h004" not in spec.hosts


def test_duplicate_or_too_few_hosts_are_refused() -> None:
    with pytest.raises(ValueError, match="more than once: a"):
        Planner(["a", "b", "a"], PAIR, ISLAND)
    with pytest.raises(ValueError, match="at least 2"):
        Planner(["a"], PAIR, ISLAND)

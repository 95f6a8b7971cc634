"""validate-node beyond the fake-node scenarios of tests/test_validator.py: what tools print cannot break the
report, the report path and node JSON can make it exit 2, read-only checks run concurrently, and the time
budget comes from the node JSON's timeout table."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from ndfleet_node.checks import budget_s, load_all
from ndfleet_node.config import ConfigError, parse
from ndfleet_node.health import health_state
from ndfleet_node.report import write_atomic

from ndfleet.nodefiles.bootstrap import render_output_files, validation_budget_s
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.fakes.node import hermetic_path, run_validator, write_bundle

DEV_MOUNTS = ["/mnt/resource_nvme", "/mnt/blob/datasets", "/mnt/blob/checkpoints"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    spec = load_spec(load_stack("dev").ndfleet_config, "dev")
    return write_bundle(tmp_path_factory.mktemp("bundle"), render_output_files(spec, spec.islands[0]))


def replace_tool(bindir: Path, name: str, script: str) -> None:
    (bindir / name).unlink()
    (bindir / name).write_text("#!/usr/bin/env bash\n" + script)
    (bindir / name).chmod(0o755)


def test_whatever_a_tool_prints_the_report_is_utf8_json(tmp_path, bundle):
    bindir = Path(hermetic_path(tmp_path / "bin"))
    # bytes >= 0x80, NUL, an escape sequence and a 2 MB line
    garbage = r"""printf '\xff\xfe\x80 GPU \x00\x1b[31m\n'; head -c 2097152 /dev/zero | tr '\0' 'A'; echo"""
    replace_tool(bindir, "nvidia-smi", garbage)
    r = run_validator(bundle, tmp_path, "quick", mounts=DEV_MOUNTS, bindir=bindir)
    raw = (tmp_path / "out" / "report.json").read_bytes()
    raw.decode("utf-8")  # valid UTF-8
    assert raw.isascii()
    report = json.loads(raw)
    assert r.rc == 1 and report["status"] == "unhealthy"
    gpu = next(c for c in report["checks"] if c["id"] == "gpu.count")
    assert gpu["status"] == "fail" and gpu["message"].startswith("cannot read nvidia-smi --query-gpu output")
    assert len(gpu["message"]) <= 2000
    assert {c["id"] for c in report["checks"] if c["status"] == "fail"} >= {"gpu.count", "gpu.row_remap", "gpu.nvlink"}


def test_report_path_that_is_a_directory_cannot_run(tmp_path, bundle):
    (tmp_path / "report-dir").mkdir()
    r = run_validator(bundle, tmp_path, args=["--level", "quick", "--report", str(tmp_path / "report-dir")])
    assert r.rc == 2
    assert "is a directory" in r.stderr and "Traceback" not in r.stderr
    assert list((tmp_path / "report-dir").iterdir()) == []


def test_unreadable_node_json_cannot_run_and_the_node_is_unhealthy(tmp_path, bundle):
    broken = tmp_path / "bundle"
    broken.mkdir()
    for f in bundle.iterdir():
        (broken / f.name).symlink_to(f)
    (broken / "node.json").unlink()
    (broken / "node.json").write_text('{"schema": 1}')
    r = run_validator(broken, tmp_path, "quick", mounts=DEV_MOUNTS)
    assert r.rc == 2 and "missing section(s) stack, island" in r.stderr and "Traceback" not in r.stderr
    assert r.report is not None and r.report["status"] == "error"
    state, reason = health_state(str(tmp_path / "out" / "report.json"), str(tmp_path / "failed"))
    assert state == "Unhealthy" and "missing section" in reason


def test_read_only_checks_run_concurrently(tmp_path, bundle):
    bindir = Path(hermetic_path(tmp_path / "bin"))
    log = tmp_path / "times"
    for name in ("ibstat", "lspci"):
        real = os.readlink(bindir / name)
        # the first call of each takes a second (ib.pcie calls lspci once per HCA: only the first one waits)
        first = f"{log}.{name}"
        script = (f'echo "start {name}" >> {log}; [ -e {first} ] || {{ touch {first}; sleep 1; }}; '
                  f'echo "end {name}" >> {log}; exec {real} "$@"\n')  # fmt: skip
        replace_tool(bindir, name, script)
    r = run_validator(bundle, tmp_path, "quick", mounts=DEV_MOUNTS, bindir=bindir)
    assert r.rc == 0, r.stdout + r.stderr
    events = log.read_text().split("\n")
    # ibstat (ib.ports) and the first lspci (ib.pcie) both started before either ended
    first_end = min(i for i, e in enumerate(events) if e.startswith("end"))
    assert {"start ibstat", "start lspci"} <= set(events[:first_end])


def test_the_budget_is_the_runners_timeout_table(bundle):
    cfg = parse((bundle / "node.json").read_text())
    unit = (bundle / "ndfleet-validate.service").read_text()
    timeout = int(next(ln for ln in unit.splitlines() if ln.startswith("TimeoutStartSec=")).split("=")[1])
    assert timeout == math.ceil(budget_s(cfg, cfg.validation["level"]))
    spec = load_spec(load_stack("dev").ndfleet_config, "dev")
    assert validation_budget_s(spec) == spec.profile.thresholds.setup_timeout_s + timeout
    # every check of every level declares its calls against keys of the timeout table
    checks = load_all()
    for level, ids in cfg.levels().items():
        for i in ids:
            assert all(key in cfg.timeouts for key, _ in checks[i].calls), (level, i)


def test_budget_follows_the_tool_timeout(bundle):
    data = json.loads((bundle / "node.json").read_text())
    base = budget_s(parse(json.dumps(data)), "quick")
    data["timeouts"]["tool"] *= 2
    assert budget_s(parse(json.dumps(data)), "quick") == 2 * base


def test_node_json_keeps_sections_of_other_features(bundle):
    data = json.loads((bundle / "node.json").read_text())
    data["slurm"] = {"partition": "gpu", "features": ["ib00"]}
    cfg = parse(json.dumps(data))
    assert cfg.section("slurm") == {"partition": "gpu", "features": ["ib00"]}
    assert cfg.section("no-such-feature") == {}  # an absent section reads as {}


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not valid JSON"),
    ("[]", "expected a JSON object, got list"),
    ('{"schema": 1}', "missing section(s) stack, island, vm_size"),
])  # fmt: skip
def test_bad_node_json_is_a_clear_error(text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(text, "/etc/ndfleet/node.json")


def test_wrong_schema_is_refused(bundle):
    data = json.loads((bundle / "node.json").read_text())
    data["schema"] = 2
    with pytest.raises(ConfigError, match="schema 2, this program reads schema 1"):
        parse(json.dumps(data))


def test_report_is_replaced_atomically(tmp_path):
    path = tmp_path / "report.json"
    path.write_text('{"status": "old"}')
    write_atomic(str(path), '{"status": "new"}\n')
    assert path.read_text() == '{"status": "new"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


@pytest.mark.parametrize("level", ["quick", "full"])
def test_wall_time_on_the_fake_node(tmp_path, bundle, level, capsys):
    r = run_validator(bundle, tmp_path, level, mounts=DEV_MOUNTS)
    assert r.rc == 0, r.stdout + r.stderr
    with capsys.disabled():
        print(f"\nvalidate-node --level {level} on the fake node: {r.seconds:.2f} s wall "
              f"(report duration_s {r.report and r.report['duration_s']})")  # fmt: skip

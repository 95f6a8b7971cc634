"""Fixtures for the monitoring tests: a small stack with monitoring on, and the real promtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ndfleet.spec.config import ClusterSpec, load_spec
from tests.conftest import base_config

# Generous: promtool starts in well under a second, but CI machines are small and busy.
PROMTOOL_TIMEOUT_S = 120


def monitoring_config(**overrides: Any) -> dict[str, Any]:
    """Two small islands (4 and 2 nodes) so island capacity is easy to reason about; monitoring on."""
    monitoring = {"enabled": True, "emails": ["oncall@example.com"], "islandCapacityAlertFraction": 0.75}
    monitoring.update(overrides)
    config = base_config(islands=[{"name": "a", "nodes": 4}, {"name": "b", "nodes": 2}], monitoring=monitoring)
    del config["nodes"]
    return config


@pytest.fixture(scope="session")
def mon_spec() -> ClusterSpec:
    return load_spec(monitoring_config(), "test")


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool")
    # Not a skip: CI installs Debian's prometheus package (.ci/run), so a missing promtool is a broken set-up.
    assert found, "promtool not found: apt-get install prometheus (Debian's package provides promtool)"
    return found


def run_promtool(promtool: str, *args: str, cwd: Path | None = None, stdin: str | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        [promtool, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
    )
    return proc.returncode, proc.stdout + proc.stderr

"""docs/monitoring.md carries the generated alert table, dashboard panels, exported metric names and cost figures of
the prod example, so the page cannot drift from the code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ndfleet.monitoring.alerts import alerts_table_markdown
from ndfleet.monitoring.budget import budget_markdown, cost_markdown
from ndfleet.monitoring.dashboards import panels_markdown
from ndfleet.monitoring.exporters import exported_markdown
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from tests.monitoring.test_monitoring_plan import prod_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"


@pytest.fixture(scope="module")
def prod_spec() -> ClusterSpec:
    return load_spec(prod_config(), "prod")


@pytest.mark.parametrize("section", [alerts_table_markdown, panels_markdown, cost_markdown, budget_markdown])
def test_doc_carries_the_generated_section(prod_spec: ClusterSpec, section: Callable[[ClusterSpec], str]) -> None:
    assert section(prod_spec) in DOC.read_text()


def test_doc_lists_the_exported_metrics() -> None:
    assert exported_markdown() in DOC.read_text()


def test_readme_links_the_page() -> None:
    readme = (DOC.parent.parent / "README.md").read_text()
    assert "docs/monitoring.md" in readme and "ndfleet:monitoring.enabled" in readme

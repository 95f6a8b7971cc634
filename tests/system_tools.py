"""The system tools the suite runs for real (promtool, cloud-init, Slurm, ...): one registry, one way to ask for one.

The registry is tests/system-packages.txt (tool -> Debian/Ubuntu package -> why), which tests/run also reads to
install the packages. A test asks for tools with the marker `@pytest.mark.needs_tool("promtool", ...)` or, in a
fixture that needs the path, `require_tool("promtool")`. When a tool is missing the test is skipped, and at the end
of the run one summary line names the missing tools, how many tests were skipped and the command that installs them.
Under CI (env CI, which .ci/run exports) or with NDFLEET_REQUIRE_TOOLS=1 a missing tool fails the test instead: the
tests that run a real daemon must not turn into skips where the tools are meant to be installed.

Loaded as a plugin by tests/conftest.py (`pytest_plugins`).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

REGISTRY_FILE = Path(__file__).resolve().with_name("system-packages.txt")
SKIP_PREFIX = "system tool missing: "
# "system tool missing: cloud-init, promtool (install: ...)": the tools, as the skip reason names them.
_REASON = re.compile(re.escape(SKIP_PREFIX) + r"(?P<tools>[^()]+?) \(install:")


@dataclass(frozen=True)
class SystemTool:
    name: str
    # Names that will do as well (Debian's node exporter is `prometheus-node-exporter`, upstream's `node_exporter`).
    alternatives: tuple[str, ...]
    package: str
    why: str


def load_registry(path: Path = REGISTRY_FILE) -> dict[str, SystemTool]:
    tools: dict[str, SystemTool] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        names, package, why = (line.split(maxsplit=2) + [""])[:3]
        first, *alternatives = names.split("|")
        tools[first] = SystemTool(first, tuple(alternatives), package, why)
    return tools


TOOLS = load_registry()


def tools_required() -> bool:
    """CI (env CI, as .ci/run and GitHub Actions set it) or NDFLEET_REQUIRE_TOOLS=1: a missing tool is a failure."""
    ci = os.environ.get("CI", "").strip().lower()
    return ci not in ("", "0", "false", "no") or os.environ.get("NDFLEET_REQUIRE_TOOLS") == "1"


def find_tool(name: str) -> str | None:
    """The path of `name` (or one of its alternatives) on PATH; None when missing. `name` must be in the registry."""
    tool = TOOLS.get(name)
    if tool is None:
        raise KeyError(f"{name!r} is not in {REGISTRY_FILE.name}: add it with its Debian package and why")
    for candidate in (tool.name, *tool.alternatives):
        found = shutil.which(candidate)
        if found:
            return found
    return None


def install_command(names: list[str]) -> str:
    packages = sorted({TOOLS[name].package for name in names})
    return f"sudo apt-get install -y --no-install-recommends {' '.join(packages)}"


def require_tools(*names: str) -> list[str]:
    """The paths of every tool named; skips the test (fails it under CI) naming each missing one."""
    found = {name: find_tool(name) for name in names}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        message = f"{SKIP_PREFIX}{', '.join(missing)} (install: {install_command(missing)})"
        if tools_required():
            pytest.fail(message + "; CI or NDFLEET_REQUIRE_TOOLS=1 requires every system tool", pytrace=False)
        pytest.skip(message)
    return [path for path in found.values() if path is not None]


def require_tool(name: str) -> str:
    (path,) = require_tools(name)
    return path


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs_tool(*names): the test runs these system tools (tests/system-packages.txt); "
        "skipped when one is missing, failed under CI",
    )  # fmt: skip


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs_tool"):
        require_tools(*mark.args)


def missing_tool_skips(reports: list[pytest.TestReport]) -> tuple[list[str], int]:
    """The missing tools that skipped tests, and how many tests they skipped."""
    tools: set[str] = set()
    skipped = 0
    for report in reports:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        match = _REASON.search(str(reason))
        if match:
            skipped += 1
            tools.update(name.strip() for name in match["tools"].split(","))
    return sorted(tools), skipped


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    tools, skipped = missing_tool_skips(terminalreporter.stats.get("skipped", []))
    if tools:
        terminalreporter.write_line(
            f"system tools missing: {', '.join(tools)}: {skipped} tests skipped; install them with "
            f"`{install_command(tools)}` (or run `bash tests/run` as root, which installs them)",
            yellow=True,
        )

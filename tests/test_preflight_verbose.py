"""No usable credentials: preflight says so in one line naming the fixes; `--verbose` adds what azure-identity said.
The real DefaultAzureCredential runs with nothing to find (no az, no environment, no cache; the suite's network
namespace has no route out), so it fails as it does on a fresh laptop."""

from __future__ import annotations

from pathlib import Path

import pytest

from ndfleet import preflight
from ndfleet.cli import build_parser
from tests.test_preflight import _bare_environment, arm, stack_file


def preflight_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    args = build_parser().parse_args(["preflight", "--stack-file", str(stack_file(tmp_path)), *extra])
    assert preflight.run_cli(args, transport=arm()) == 2
    return capsys.readouterr().err


@pytest.fixture
def no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    _bare_environment(monkeypatch, tmp_path)
    return tmp_path


def test_credential_error_is_one_line_naming_the_fixes(
    no_credentials: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (line,) = preflight_stderr(no_credentials, capsys).splitlines()
    assert line.startswith("ndfleet preflight: error: could not check: no usable Azure credentials for AzureCloud")
    for fix in ("`az login`", "AZURE_CLIENT_ID", "NDFLEET_MANAGED_IDENTITY=true", "--verbose"):
        assert fix in line


def test_verbose_adds_what_each_credential_said(no_credentials: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, *details = preflight_stderr(no_credentials, capsys, "--verbose").splitlines()
    assert first.startswith("ndfleet preflight: error: could not check: no usable Azure credentials for AzureCloud")
    assert details[0] == "azure-identity said:"
    assert any(line.strip().startswith("- EnvironmentCredential:") for line in details)
    assert any(line.strip().startswith("- AzureCliCredential:") for line in details)

"""Every bad configuration of tests/test_spec.py's table is refused alike by `ndfleet render`, `ndfleet plan` and
`ndfleet preflight` (before it would call Azure), from a stack file, with the same message and exit code 1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ndfleet.cli import main
from tests.conftest import base_config
from tests.test_spec import BAD_CONFIGS

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"


def write_stack(folder: Path, overrides: dict[str, Any]) -> Path:
    config = {f"ndfleet:{k}": v for k, v in base_config(**overrides).items() if v is not None}
    path = folder / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


@pytest.mark.parametrize(("overrides", "message"), BAD_CONFIGS, ids=[m[:40] for _, m in BAD_CONFIGS])
def test_every_command_refuses_the_bad_configuration(
    overrides: dict[str, Any], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_stack(tmp_path, overrides)
    out = tmp_path / "out"
    for argv in (
        ["render", "--stack-file", str(path), "--out", str(out)],
        ["plan", "--stack-file", str(path)],
        ["preflight", "--stack-file", str(path)],
    ):
        code = main(argv)
        captured = capsys.readouterr()
        assert code != 0, argv
        assert message in captured.err + captured.out, argv
        assert "Traceback" not in captured.err
    assert not out.exists()

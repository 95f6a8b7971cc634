"""`ndfleet plan --program DIR`: any Pulumi Python program (the examples, your own) under Pulumi's mock runtime.

The program is DIR/__main__.py, run as the Pulumi CLI's Python runtime runs it: as `__main__`, from DIR (the
working directory, and first on sys.path for the program's own modules), with the stack's config, project name
from DIR/Pulumi.yaml. Nothing is sent anywhere: every resource is recorded with the inputs it would send the
provider. What is printed is what the program registered and exported; when the program prepared one ndfleet
cluster (`ndfleet.prepare.prepare`, as the examples do), the plan also carries that cluster's summary, cost and
warnings, like `ndfleet plan --stack`, and `--policies` checks it. A program that prepared none gets a plain note of
what its plan lacks.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

import pulumi

from ndfleet.cost.estimate import estimate_cost, plan_cost_lines
from ndfleet.plans.build import SCHEMA_VERSION, PlannedResource, execute_program, plan_summary
from ndfleet.prepare import PreparedCluster, recording_prepared
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.stackfile import PROJECT_FILE_NAME, StackFile, StackFileError, load_stack, read_yaml


class ProgramDirError(Exception):
    """DIR is not a Pulumi Python program."""


def program_project(program_dir: Path) -> str:
    """The project name in DIR/Pulumi.yaml; the program must be a Python one with a __main__.py."""
    project_file = program_dir / PROJECT_FILE_NAME
    if not project_file.is_file():
        raise ProgramDirError(f"--program {program_dir}: no {PROJECT_FILE_NAME} there (a Pulumi project folder)")
    try:
        project = read_yaml(project_file)
    except StackFileError as e:
        raise ProgramDirError(f"--program {program_dir}: {e}") from None
    runtime = project.get("runtime") if isinstance(project, dict) else None
    runtime_name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if runtime_name != "python":
        raise ProgramDirError(f"--program {program_dir}: runtime {runtime_name!r} in {PROJECT_FILE_NAME}; "
                              "only Python programs run under ndfleet's mocks")
    if not (program_dir / "__main__.py").is_file():
        raise ProgramDirError(f"--program {program_dir}: no __main__.py (the program Pulumi's Python runtime runs)")
    name = project.get("name")
    if not isinstance(name, str) or not name:
        raise ProgramDirError(f"--program {program_dir}: {PROJECT_FILE_NAME} has no project name")
    return name


def run_program_dir(program_dir: Path, stack: StackFile) -> tuple[list[PlannedResource], dict[str, Any]]:
    """What the program in `program_dir` registers and exports under the mocks. pulumi.RunError propagates."""
    project = program_project(program_dir)
    folder = program_dir.resolve()

    def program() -> None:
        runpy.run_path(str(folder / "__main__.py"), run_name="__main__")

    cwd = Path.cwd()
    sys.path.insert(0, str(folder))
    os.chdir(folder)
    try:
        run = execute_program(stack, program=program, project=project)
    finally:
        os.chdir(cwd)
        sys.path.remove(str(folder))
    return run.resources, run.outputs


def stack_of(args: argparse.Namespace, program_dir: Path) -> StackFile:
    """--stack NAME is DIR/Pulumi.NAME.yaml (where the Pulumi CLI keeps a project's stack files); --stack-file any."""
    if args.stack is not None:
        return load_stack(path=program_dir / f"Pulumi.{args.stack}.yaml", stack_name=args.stack)
    return load_stack(path=args.stack_file, stack_name=args.stack_name)


def render(program_dir: Path, stack: str, resources: list[PlannedResource], outputs: dict[str, Any]) -> str:
    lines = [f"ndfleet plan: program {program_dir}, stack {stack} (Pulumi's mock runtime: nothing is created)", ""]
    width = max((len(r.name) for r in resources), default=4)
    lines += [f"  + {r.name.ljust(width)}  {r.type}" for r in resources]
    custom = sum(1 for r in resources if r.type.startswith("azure-native:"))
    lines += ["", f"{custom} Azure resources to create ({len(resources) - custom} other resources)."]
    if outputs:
        lines += ["", "Outputs:"] + [f"  {k}: {json.dumps(v, default=str)}" for k, v in outputs.items()]
    return "\n".join(lines) + "\n"


def cluster_of(prepared: list[PreparedCluster]) -> tuple[ClusterSpec | None, str | None]:
    """The one ndfleet cluster the program prepared, or None and a plain statement of what its plan then lacks."""
    if len(prepared) == 1:
        return prepared[0].spec, None
    why = ("the program prepared no ndfleet cluster (ndfleet.prepare.prepare)" if not prepared else
           f"the program prepared {len(prepared)} ndfleet clusters, and one summary cannot stand for them")
    return None, (f"{why}: its plan carries no summary, cost or warnings. `ndfleet diff` compares its resources but "
                  "not its cost, and takes GPUs per node from each scale set's VM size; `ndfleet policy` checks its "
                  "resources (the policy rules read nothing else)")


def plan_document(program_dir: Path, stack: str, resources: list[PlannedResource], outputs: dict[str, Any],
                  spec: ClusterSpec | None) -> dict[str, Any]:
    """The program's plan in the plan document's form (docs/plan-json.md): what `ndfleet diff` and `ndfleet policy`
    read, with the summary and cost of the cluster it prepared (when it prepared one)."""
    doc: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "program": str(program_dir),
        "stack": stack,
        "resources": [r.as_json() for r in sorted(resources, key=lambda r: (r.type, r.name))],
        "outputs": outputs,
    }
    if spec is not None:
        doc["summary"] = plan_summary(spec)
        doc["cost"] = estimate_cost(spec).as_json()
    return doc


def plan_program_command(args: argparse.Namespace) -> int:
    program_dir = Path(args.program)
    try:
        stack = stack_of(args, program_dir)
        with recording_prepared() as prepared:
            resources, outputs = run_program_dir(program_dir, stack)
    except (ProgramDirError, StackFileError, pulumi.RunError) as error:
        from ndfleet.cliconvention import fail

        return fail(args, str(error))
    spec, not_checked = cluster_of(prepared)
    doc = plan_document(program_dir, stack.name, resources, outputs, spec)
    warnings = [] if spec is None else list(spec.warnings)
    if args.format == "json":
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
        for warning in warnings:  # as `ndfleet plan --stack`: beside JSON they go to stderr
            print(f"warning: {warning}", file=sys.stderr)
    else:
        text = render(program_dir, stack.name, resources, outputs)
        text += "".join(["\n"] * bool(warnings) + [f"warning: {w}\n" for w in warnings])
        if spec is not None:
            text += "\n".join(plan_cost_lines(spec)) + "\n"
        sys.stdout.write(text)
    if not_checked is not None:
        print(f"note: {not_checked}", file=sys.stderr)
    if args.policies:
        from ndfleet.plans.policy_rules import report_policies

        return report_policies(doc, sys.stderr if args.format == "json" else sys.stdout)
    return 0

"""Read Pulumi stack files (`stacks/Pulumi.<stack>.yaml`) and the project's config defaults offline.

The Pulumi CLI hands a program its config as strings, with structured values JSON-encoded, merged over the
project-level defaults declared in `Pulumi.yaml`. `load_stack` reproduces that, so the offline plan, `render`
and `preflight` see exactly what `pulumi up` would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ndfleet.regularfile import NotARegularFile, read_regular_file
from ndfleet.stackconfig.config import from_engine
from ndfleet.stackconfig.names import stack_name_problem
from ndfleet.stackconfig.settings import ENCRYPTED_VALUE, NAMESPACE

PROJECT_FILE_NAME = "Pulumi.yaml"
# A stack file is a few dozen lines; anything past this is not one (and would only cost time and memory).
MAX_STACK_FILE_BYTES = 1 << 20


class StackFileError(Exception):
    """The stack file is missing or not in Pulumi's stack-file format."""


class AliasRefused(yaml.YAMLError):
    """A YAML anchor or alias: refused, because nested aliases let a few hundred bytes expand to gigabytes."""

    def __init__(self, what: str, mark: Any):
        super().__init__(f"{what} at line {mark.line + 1}, column {mark.column + 1}")


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key written twice in one mapping is an error (Pulumi refuses such a stack file;
    PyYAML would silently keep the last value), and so is any anchor or alias: Pulumi stack files are plain
    key/value config, and nested aliases ("billion laughs") let a 400-byte file expand to gigabytes."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise AliasRefused(f"alias *{event.anchor}", event.start_mark)
        if isinstance(event, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)) and event.anchor:
            raise AliasRefused(f"anchor &{event.anchor}", event.start_mark)
        return super().compose_node(parent, index)


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is written twice (lines {first_line[key]} and {line}): keep one",
                    key_node.start_mark,
                )
            first_line[key] = line
        except TypeError:  # an unhashable key: let the normal constructor report it
            break
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def read_yaml(file: Path) -> Any:
    """Parse a Pulumi YAML file: a regular file only, bounded in size, duplicate keys, anchors and aliases
    refused. Raises StackFileError."""
    try:
        data = read_regular_file(file, MAX_STACK_FILE_BYTES)
    except NotARegularFile as e:
        raise StackFileError(f"{file} is {e.kind}, not a stack file (only a regular file is read)") from None
    except OSError as e:
        raise StackFileError(f"cannot read {file}: {e.strerror or e}") from None
    if len(data) > MAX_STACK_FILE_BYTES:
        raise StackFileError(f"{file} is larger than {MAX_STACK_FILE_BYTES // 1024} KiB: not a stack file")
    try:
        return yaml.load(data.decode("utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except UnicodeDecodeError:
        raise StackFileError(f"{file} is not UTF-8 text") from None
    except AliasRefused as e:
        raise StackFileError(f"{file}: YAML anchors and aliases are not accepted ({e}); write each value out, "
                             "as Pulumi stack files do") from None
    except yaml.YAMLError as e:
        raise StackFileError(f"{file} is not valid YAML: {e}") from None
    except RecursionError:
        raise StackFileError(f"{file} is nested too deeply to be a stack file") from None


def find_project_file(start: Path | None = None) -> Path | None:
    """The Pulumi project file (`Pulumi.yaml`) of the current directory or the nearest one above it, as the
    Pulumi CLI finds it; None outside a Pulumi project."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / PROJECT_FILE_NAME
        if candidate.is_file():
            return candidate
    return None


def stacks_dir(project_file: Path | None = None) -> Path:
    """Where the project keeps its stack files: Pulumi.yaml's `stackConfigDir`, else beside Pulumi.yaml."""
    project_file = project_file or find_project_file()
    if project_file is None:
        return Path.cwd()
    try:
        project = read_yaml(project_file) or {}
    except StackFileError:
        project = {}
    configured = project.get("stackConfigDir") if isinstance(project, dict) else None
    return project_file.parent / configured if isinstance(configured, str) else project_file.parent


@dataclass(frozen=True)
class StackFile:
    name: str
    path: Path
    # Engine form: "ndfleet:nodes" -> "2", structured values JSON-encoded, as the Pulumi CLI passes them.
    engine_config: dict[str, str]
    secret_keys: tuple[str, ...]
    # Values that should be Pulumi secrets but are written in clear text (clear_text_secret_warnings).
    warnings: tuple[str, ...] = ()

    @property
    def ndfleet_config(self) -> dict[str, Any]:
        """`ndfleet:*` keys, namespace stripped, as the values the stack file holds (for `load_spec`)."""
        return from_engine(self.engine_config)

    @classmethod
    def from_config(cls, name: str, path: Path, config: dict[str, Any]) -> StackFile:
        """Build the engine form from a stack file's `config` mapping, over the project's defaults, as the
        Pulumi CLI does: keys without a namespace belong to the project; `secure:` values (encrypted with the
        stack's key, which an offline tool does not have) become "[secret]"; a key set to null is unset."""
        merged: dict[str, Any] = project_defaults()
        secret_keys: list[str] = []
        seen: dict[str, str] = {}
        for key, value in config.items():
            full = key if ":" in key else f"{NAMESPACE}:{key}"
            if full in seen:
                raise StackFileError(f"{path}: {seen[full]!r} and {key!r} are the same setting ({full}); keep one")
            seen[full] = str(key)
            if isinstance(value, dict) and set(value) == {"secure"}:
                secret_keys.append(full)
                value = ENCRYPTED_VALUE
            merged[full] = value
        return cls(
            name=name,
            path=path,
            engine_config={k: _engine_value(v) for k, v in merged.items() if v is not None},
            secret_keys=tuple(secret_keys),
            warnings=tuple(clear_text_secret_warnings(path, config)),
        )


def clear_text_secret_warnings(path: Path, config: dict[str, Any]) -> list[str]:
    """A setting that may carry a credential, written in clear text in the stack file (which is usually in git):
    `monitoring.webhooks`, whose URLs often hold a token (a Teams or Slack incoming webhook, a Logic App's `sig`).
    ndfleet masks them in plans; the file itself should hold them encrypted, as `secure:` values that only the
    stack's key decrypts (Pulumi docs, "Secrets": `pulumi config set --secret`). Indexes only: never the URL."""
    monitoring = config.get(f"{NAMESPACE}:monitoring", config.get("monitoring"))
    webhooks = monitoring.get("webhooks") if isinstance(monitoring, dict) else None
    if not isinstance(webhooks, list):
        return []
    plain = [i for i, w in enumerate(webhooks) if isinstance(w, str)]
    if not plain:
        return []
    first = plain[0]
    return [
        f"{NAMESPACE}:monitoring.webhooks{plain} written in clear text in {path.name}: a webhook URL usually carries "
        "its token, and the stack file is usually in git; store each as a Pulumi secret, encrypted with the stack's "
        f"key: pulumi config set --secret --path '{NAMESPACE}:monitoring.webhooks[{first}]' URL (docs/monitoring.md)"
    ]


def _engine_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def project_defaults(project_file: Path | None = None) -> dict[str, Any]:
    """Defaults of the project-level `config` block of Pulumi.yaml, keyed `ndfleet:<key>`."""
    project_file = project_file or find_project_file()
    if project_file is None or not project_file.exists():
        return {}
    project = read_yaml(project_file) or {}
    declared = project.get("config") if isinstance(project, dict) else None
    out: dict[str, Any] = {}
    for key, decl in (declared if isinstance(declared, dict) else {}).items():
        full = key if ":" in key else f"{NAMESPACE}:{key}"
        if isinstance(decl, dict) and "default" in decl:
            out[full] = decl["default"]
        elif isinstance(decl, dict) and "value" in decl:
            out[full] = decl["value"]
        elif not isinstance(decl, dict):
            out[full] = decl
    return out


def stack_path(name: str) -> Path:
    return stacks_dir() / f"Pulumi.{name}.yaml"


def _project_file_given(file: Path) -> str:
    # Pulumi.yaml holds the project (name, runtime, config declarations); a stack's settings are in
    # Pulumi.<stack>.yaml (https://www.pulumi.com/docs/iac/concepts/projects/project-file/).
    return (
        f"{file} is the Pulumi project file (it has 'runtime'), not a stack file: give a stack file, "
        "Pulumi.<stack>.yaml (e.g. --stack-file stacks/Pulumi.dev.yaml), or --stack NAME"
    )


def load_stack(name: str | None = None, path: str | Path | None = None, stack_name: str | None = None) -> StackFile:
    """Load `stacks/Pulumi.<name>.yaml`, or any stack file at `path`: its stack name is `stack_name` when given (a
    copy of a stack file planned under the original's name, whose resource names derive from it), else taken from
    the file name."""
    if (name is None) == (path is None):
        raise StackFileError("give either a stack name (--stack) or a stack file (--stack-file)")
    if stack_name is not None and path is None:
        raise StackFileError(f"--stack-name {stack_name!r} goes with --stack-file (--stack names the stack already)")
    if path is None:
        assert name is not None
        problem = stack_name_problem(name)
        if problem is not None:
            raise StackFileError(f"--stack: {problem}")
        file = stack_path(name)
        if not file.exists():
            known = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in file.parent.glob("Pulumi.*.yaml"))
            raise StackFileError(
                f"no stack {name!r}: {file} does not exist; known stacks: {', '.join(known) or 'none'}"
            )
    else:
        file = Path(path)
        if not file.exists():
            raise StackFileError(f"stack file {file} does not exist")
        if file.name == PROJECT_FILE_NAME:
            raise StackFileError(_project_file_given(file))
        stem = file.name
        name = (
            stem[len("Pulumi.") : -len(".yaml")] if stem.startswith("Pulumi.") and stem.endswith(".yaml") else file.stem
        )
        if stack_name is not None:
            problem = stack_name_problem(stack_name)
            if problem is not None:
                raise StackFileError(f"--stack-name: {problem}")
            name = stack_name
        problem = stack_name_problem(name)
        if problem is not None:
            raise StackFileError(
                f"{file}: the stack's name is taken from the file name (Pulumi.<stack>.yaml) and {problem}; "
                "rename the file or give the name with --stack-name"
            )
    config = read_stack_config(file)
    from ndfleet.stackconfig import smoke

    if smoke.is_smoke(config):
        # A smoke stack: its base's settings at smoke size (docs/smoke.md), derived here for every command.
        try:
            config = smoke.resolve_smoke(name, file, config, read_stack_config, _settings_of)
        except smoke.SmokeRefused as e:
            raise StackFileError(str(e)) from None
    stack = StackFile.from_config(name, file, config)
    shared = shared_prefix_warnings(name, file, config)
    return replace(stack, warnings=(*stack.warnings, *shared)) if shared else stack


def _prefix_of(name: str, config: dict[str, Any]) -> str:
    from ndfleet.stackconfig.names import default_prefix

    own = config.get(f"{NAMESPACE}:namePrefix", config.get("namePrefix"))
    return own if isinstance(own, str) else default_prefix(name)


def shared_prefix_warnings(name: str, file: Path, config: dict[str, Any]) -> list[str]:
    """The other stack files beside this one whose resource-name prefix is this stack's: in one subscription their
    scale sets and hosts (`<prefix>-<island>-...`) would be one stack's to `ndfleet status`, the alerts and goodput
    (docs/operations.md, "Which scale sets are the stack's"). A warning, not a refusal: stacks in different
    subscriptions may share one. A sibling that cannot be read is left out (its own commands report it)."""
    mine = _prefix_of(name, config)
    others = []
    for sibling in sorted(file.parent.glob("Pulumi.*.yaml")):
        other = sibling.name[len("Pulumi.") : -len(".yaml")]
        if sibling.resolve() == file.resolve() or other == name or stack_name_problem(other) is not None:
            continue
        try:
            if _prefix_of(other, read_stack_config(sibling)) == mine:
                others.append(other)
        except StackFileError:
            continue
    if not others:
        return []
    return [
        f"{NAMESPACE}:namePrefix: stack {name!r} names its resources and hosts '{mine}-...', as stack(s) "
        f"{', '.join(repr(o) for o in others)} beside it do; in one subscription `ndfleet status`, the alerts and "
        f"goodput could not tell their scale sets and nodes apart: give each its own {NAMESPACE}:namePrefix"
    ]


def _settings_of(name: str, path: Path, config: dict[str, Any]) -> dict[str, Any]:
    return StackFile.from_config(name, path, config).ndfleet_config


def read_stack_config(file: Path) -> dict[str, Any]:
    """The `config` mapping of a stack file, as written. Raises StackFileError."""
    doc = read_yaml(file) or {}
    if not isinstance(doc, dict):
        raise StackFileError(f"{file} is not a Pulumi stack file: expected a mapping with a 'config' key")
    if "runtime" in doc:  # the project file's required key, never a stack file's (Pulumi's project-file reference)
        raise StackFileError(_project_file_given(file))
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise StackFileError(f"{file}: 'config' must be a mapping of 'namespace:key: value'")
    return config

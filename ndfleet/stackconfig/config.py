"""Read and validate the whole stack configuration into one ClusterSpec, before any resource exists.

Data flows one way: stack config (`ndfleet:*` keys) -> `StackConfig` (pydantic, the keys as the user writes
them) -> `ClusterSpec` (derived and cross-checked: islands, subnets, quota) -> components and templates.
Every error names the setting by its full path, the value given and what would be valid; all errors are
collected and reported at once, so a user fixes a stack file in one round.

Modules: settings.py (the settings as written, field by field), clusterspec.py (the validated spec),
derive.py (the checks across settings and the derived islands and subnets), problems.py (the error messages).
This module is the way in: `load_spec` (and reading the config from Pulumi's engine).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.derive import build_spec
from ndfleet.stackconfig.names import stack_name_problem
from ndfleet.stackconfig.problems import SpecError, setting_problem
from ndfleet.stackconfig.settings import NAMESPACE, StackConfig

# A required setting that is missing or invalid is replaced by this stand-in for the second pass only (so the
# cross-setting checks of the other settings still run); checks that read it are skipped.
# An ED25519 key of 32 zero bytes: well-formed, and nobody's.
STAND_IN_SSH_KEY = "ssh-ed25519 " + base64.b64encode(b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + bytes(32)).decode()
_STAND_INS = {"location": "eastus", "sshPublicKey": STAND_IN_SSH_KEY}

_NUMERIC_OR_BOOL = (int, float, bool)


def from_engine(engine_config: Mapping[str, Any]) -> dict[str, Any]:
    """The `ndfleet:*` keys of config in the engine's form, namespace stripped, as the values the user wrote.

    Pulumi hands a program every config value as a string: structured values JSON-encoded, scalars as text
    ("301", "true"). Structured values are decoded, and number and boolean keys get their JSON value, so
    validation sees (and error messages show) what the stack file says. String keys stay strings: `zone: "2"`
    must not become the number 2.
    """
    fields = {f.alias or n: f for n, f in StackConfig.model_fields.items()}
    prefix = NAMESPACE + ":"
    out: dict[str, Any] = {}
    for full_key, value in engine_config.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix) :]
        if isinstance(value, str):
            field = fields.get(key)
            numeric = field is not None and all(
                a in _NUMERIC_OR_BOOL or a is type(None) for a in get_args(field.annotation) or (field.annotation,)
            )
            if value[:1] in ("{", "[") or numeric:
                try:
                    parsed = json.loads(value)
                except json.JSONDecodeError:
                    parsed = value
                if not numeric or isinstance(parsed, _NUMERIC_OR_BOOL):
                    value = parsed
        out[key] = value
    return out


def read_pulumi_config() -> dict[str, Any]:
    """All `ndfleet:*` keys of the running stack (Pulumi CLI or mock runtime), as `from_engine` gives them."""
    from pulumi.runtime import config as runtime_config

    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return from_engine(merged)


# The one line of a refusal whose stack-wide checks (ndfleet/prepare.py) could not run yet.
STACK_CHECKS_SKIPPED = (
    "further checks of the stack as a whole (boot data size, probe grace period, elastic timing) were skipped until "
    "these are fixed"
)


@dataclass(frozen=True)
class CheckedSettings:
    """The settings checks of a stack (each setting, then the checks across settings): every problem they found, and
    the spec when the stack-wide checks of the prepare step (ndfleet/prepare.py) can run on it as well.

    `spec` is set when every setting the stack writes is valid and the checks across them passed: an unknown key
    (a typo) does not stop it, since it is dropped and the stack is checked as written without it (its problem line
    names the key and the setting it was probably meant to be). An invalid value has no value to check the stack
    with: `blocked_by` names those settings, and the stack-wide checks wait for them (`SpecError.skipped`)."""

    spec: ClusterSpec | None
    problems: list[str]
    blocked_by: tuple[str, ...] = ()

    def skipped_line(self) -> str | None:
        """One line saying the stack-wide checks did not run and what must be fixed first; None when they ran or
        when there is nothing to say."""
        if self.spec is not None or not self.problems:
            return None
        which = ", ".join(f"{NAMESPACE}:{k}" for k in self.blocked_by)
        return STACK_CHECKS_SKIPPED + (f" (they read {which})" if which else "")


def _drop(raw: dict[str, Any], loc: tuple[int | str, ...]) -> bool:
    """Remove the unknown key at `loc` from the (copied) raw settings; False when the path is not there."""
    node: Any = raw
    for part in loc[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return False
    if isinstance(node, dict) and loc[-1] in node:
        del node[loc[-1]]
        return True
    return False


def check_settings(raw: Mapping[str, Any], stack: str, stack_dir: Path | None = None) -> CheckedSettings:
    """Every problem of the settings stage: each setting on its own, then the checks across settings over those that
    passed, skipping the checks that read a failed one (CheckedSettings says what the next stage may do).
    `stack_dir`: the stack file's folder, what a relative `imageContract` file is read from (None: none is)."""
    problems: list[str] = []
    name_problem = stack_name_problem(stack)
    if name_problem is not None:
        problems.append(name_problem)
        stack = "invalid-stack-name"
    kept: dict[str, Any] = copy.deepcopy(dict(raw))
    broken: set[str] = set()
    try:
        config = StackConfig.model_validate(kept)
    except ValidationError as e:
        for err in e.errors():
            problems.append(setting_problem(err))
            loc = tuple(err["loc"])
            # An unknown key is dropped where it stands (its block stays as written); any other problem takes its
            # whole top-level setting out, which the checks that read it then skip.
            if not (err["type"] == "extra_forbidden" and _drop(kept, loc)):
                broken.add(str(loc[0]) if loc else "")
        kept = {k: v for k, v in kept.items() if k not in broken}
        for key, stand_in in _STAND_INS.items():
            kept.setdefault(key, stand_in)
        try:
            config = StackConfig.model_validate(kept)
        except ValidationError:  # cannot happen: every failed key was dropped; report what we have
            return CheckedSettings(None, problems, tuple(sorted(broken)))
    broken |= {k for k in _STAND_INS if k not in raw}
    spec, cross_problems = build_spec(config, stack, frozenset(broken), stack_dir)
    problems += cross_problems
    if broken or cross_problems or name_problem is not None:
        blocked = tuple(sorted(broken)) if broken else ()
        return CheckedSettings(None, problems, blocked)
    return CheckedSettings(spec, problems)


def load_spec(raw: Mapping[str, Any], stack: str, stack_dir: Path | None = None) -> ClusterSpec:
    """Validate raw `ndfleet:*` config (namespace stripped) into a ClusterSpec, or raise SpecError.

    Every problem in one go: the settings are checked one by one, then the checks across settings (VNet size,
    islands, Lustre zone, ...) run over the settings that passed, skipping those that read a failed one. The checks
    of the stack as a whole follow in the prepare step (ndfleet.prepare.prepare_config, which reports both stages'
    problems together).
    """
    checked = check_settings(raw, stack, stack_dir)
    if checked.problems or checked.spec is None:
        raise SpecError(checked.problems)
    return checked.spec

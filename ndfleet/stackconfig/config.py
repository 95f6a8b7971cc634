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
import json
from collections.abc import Mapping
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


def load_spec(raw: Mapping[str, Any], stack: str) -> ClusterSpec:
    """Validate raw `ndfleet:*` config (namespace stripped) into a ClusterSpec, or raise SpecError.

    Every problem in one go: the settings are checked one by one, then the checks across settings (VNet size,
    islands, Lustre zone, ...) run over the settings that passed, skipping those that read a failed one.
    """
    problems: list[str] = []
    name_problem = stack_name_problem(stack)
    if name_problem is not None:
        problems.append(name_problem)
        stack = "invalid-stack-name"
    raw = dict(raw)
    broken: set[str] = set()
    try:
        config = StackConfig.model_validate(raw)
    except ValidationError as e:
        for err in e.errors():
            problems.append(setting_problem(err))
            broken.add(str(err["loc"][0]) if err["loc"] else "")
        kept = {k: v for k, v in raw.items() if k not in broken}
        for key, stand_in in _STAND_INS.items():
            kept.setdefault(key, stand_in)
        try:
            config = StackConfig.model_validate(kept)
        except ValidationError:  # cannot happen: every failed key was dropped; report what we have
            raise SpecError(problems) from None
    broken |= {k for k in _STAND_INS if k not in raw}
    spec, cross_problems = build_spec(config, stack, frozenset(broken))
    problems += cross_problems
    if problems or spec is None:
        raise SpecError(problems)
    return spec



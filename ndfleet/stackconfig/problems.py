"""Error messages: `SpecError` (every problem at once) and the one line per invalid setting that names the
setting by its full path, the value given (never a secret) and what is valid."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BaseModel

from ndfleet.stackconfig.settings import ENCRYPTED_VALUE, NAMESPACE, NODES_BOUND, StackConfig
from ndfleet.stackconfig.sshkeys import looks_private


class SpecError(Exception):
    """The stack configuration is invalid. `problems` holds one line per offending setting, from every stage of the
    checks that ran (the settings, the checks across them, the prepare step's checks of the stack as a whole);
    `skipped`, when set, says in one line which later checks could not run until these are fixed."""

    def __init__(self, problems: list[str], skipped: str | None = None):
        self.problems = problems
        self.skipped = skipped
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"invalid ndfleet stack configuration ({len(self.problems)} problem(s)):"]
        lines += [f"  - {p}" for p in self.problems]
        if self.skipped:
            lines.append(f"  {self.skipped}")
        return "\n".join(lines)


_REQUIRED_EXAMPLES = {
    "location": "the Azure region's name, e.g. `ndfleet:location: eastus` (`az account list-locations -o table` "
    "lists the names)",
    "sshPublicKey": "one OpenSSH public key line, e.g. the contents of ~/.ssh/id_ed25519.pub",
}



def _path(loc: tuple[int | str, ...]) -> str:
    out = NAMESPACE + ":"
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if i else "") + part
    return out


_TYPE_MESSAGES = {
    "int_type": "must be a whole number",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a mapping of settings",
    "model_type": "must be a mapping of settings",
    "list_type": "must be a list",
}


def _friendly(err: Mapping[str, Any]) -> str:
    kind, value = err["type"], err.get("input")
    if kind in _TYPE_MESSAGES:
        got = "a boolean" if isinstance(value, bool) else type(value).__name__ if value is not None else "null"
        got = {"str": "a string", "int": "a number", "float": "a fraction", "dict": "a mapping", "list": "a list"}.get(
            got, got
        )
        return f"{_TYPE_MESSAGES[kind]}, not {got}"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "string_pattern_mismatch":
        return f"does not match the allowed form {err['ctx']['pattern']}"
    # Lower-case the first letter of pydantic's sentences ("Input should ..."), not of an acronym ("RSA keys").
    return msg[0].lower() + msg[1:] if len(msg) > 1 and msg[1].islower() else msg


# Settings whose values may carry a credential (a webhook URL's token): errors name them, never echo them.
_SECRET_SETTINGS = {("monitoring", "webhooks")}


def show_value(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _known_keys(model: type[BaseModel]) -> list[str]:
    return sorted(f.alias or name for name, f in model.model_fields.items())


def _did_you_mean(key: str, known: list[str]) -> str | None:
    by_case = {k.lower(): k for k in known}
    if key.lower() in by_case:
        return by_case[key.lower()]
    match = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return match[0] if match else None


def setting_problem(err: Mapping[str, Any]) -> str:
    """One line for one per-setting error: the setting's full path, the value given (never a private key) and
    what is valid."""
    loc = tuple(err["loc"])
    path = _path(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        known = _known_keys(_model_at(loc[:-1]))
        guess = _did_you_mean(str(loc[-1]), known)
        hint = f"did you mean '{_path((*loc[:-1], guess))}'? " if guess else ""
        return f"{path} is not a known setting; {hint}known settings here: {', '.join(known)}"
    if kind == "missing":
        example = _REQUIRED_EXAMPLES.get(str(loc[-1])) if len(loc) == 1 else None
        return f"{path} is required" + (f": {example}" if example else "")
    if loc == ("nodes",) and kind == "less_than_equal":
        return f"{path} = {show_value(err['input'])}: {NODES_BOUND}"
    if loc == ("islands",) and kind == "too_long":
        return f"{path}: {len(err['input'])} islands; {NODES_BOUND}"
    value = err.get("input")
    if len(loc) == 1 and value == ENCRYPTED_VALUE:  # stackfile.StackFile.from_config: a `secure:` value
        return (
            f"{path} is encrypted in the stack file (`secure:`); ndfleet reads stack files offline, without the "
            f"stack's key, so it cannot check or use it: set it in plain text (`pulumi config set {path} VALUE`, "
            "without --secret)" + ("; a public key is not a secret" if loc == ("sshPublicKey",) else "")
        )
    if loc == ("sshPublicKey",) and isinstance(value, str) and looks_private(value):
        return f"{path} (value not shown): {_friendly(err)}"
    if loc[:2] in _SECRET_SETTINGS:
        return f"{path} (value not shown): {_friendly(err)}"
    return f"{path} = {show_value(value)}: {_friendly(err)}"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel]:
    """The model a validation error's location points into (`storage.lustre` -> LustreConfig)."""
    model: type[BaseModel] = StackConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        nested = _models_in(field.annotation) if field is not None else []
        if not nested:
            break
        model = nested[0]
    return model


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes inside an annotation such as `list[IslandConfig] | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]



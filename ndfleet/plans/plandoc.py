"""The plan document (`ndfleet plan --format json`, docs/plan-json.md): its schema, and the one bounded reader that
`ndfleet diff` and `ndfleet policy` use before they look at a plan.

A plan from disk is untrusted input. `read_plan` bounds what reading it can cost (a regular file only, never a FIFO
or device; file size, JSON nesting, integer length, the decompressed size of every gzip customData) and
`validate_plan` refuses any number that is not finite (Python's json reads NaN and Infinity, which no rule could
judge) and checks the types of every field ndfleet reads, so
that diff and policy never meet a value of the wrong type: `capacity: "2"` and `protect: "false"` are errors, not a
deletion and `true`. Each error names the JSON path (`resources[3].inputs.sku.capacity`). Keys ndfleet does not
read are allowed (the format may grow without a version bump); a wrong `schemaVersion` is refused.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ndfleet.regularfile import NotARegularFile, read_regular_file
from ndfleet.stackconfig.names import stack_name_problem

PLAN_SCHEMA_VERSION = 1
# A 1,280-node plan is about 1 MB; a plan file larger than this is not one of ours.
MAX_PLAN_BYTES = 64 << 20
# A plan nests about 10 levels deep (resources[].inputs.virtualMachineProfile.networkProfile...).
MAX_PLAN_DEPTH = 64
# A node bootstrap (customData) is at most 64 KiB before compression and Azure takes at most 64 KiB of base64:
# decompressing stops here, so a gzip bomb in a plan costs nothing.
MAX_DECODED_CUSTOM_DATA_BYTES = 1 << 20
# Every integer in a plan (capacities, sizes, ports, counts) fits in 64 bits, which is at most 19 digits and a sign;
# a longer one is refused by its JSON path before Python's int() is asked (which gives up at 4,300 digits).
MAX_INTEGER_DIGITS = 20
CUSTOM_DATA_PATH = ("virtualMachineProfile", "osProfile", "customData")
GZIP_MAGIC = b"\x1f\x8b"


class PlanFormatError(ValueError):
    """A plan file that is not an `ndfleet plan --format json` document; the message names the JSON path."""


class TooLarge(ValueError):
    """Decompressing would pass the bound."""


def gunzip_bounded(data: bytes, limit: int = MAX_DECODED_CUSTOM_DATA_BYTES) -> bytes:
    """gzip-decompress `data`, refusing (TooLarge) to produce more than `limit` bytes. zlib.error on bad data."""
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = decompressor.decompress(data, limit + 1)
    if len(out) > limit or decompressor.unconsumed_tail:
        raise TooLarge(f"decompresses to more than {limit // 1024} KiB")
    return out


def decode_custom_data(value: str, limit: int = MAX_DECODED_CUSTOM_DATA_BYTES) -> bytes | None:
    """The bytes inside a customData value (base64, optionally of gzip); None if it is not base64 or not valid gzip.
    Raises TooLarge past `limit`."""
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    if raw[:2] != GZIP_MAGIC:
        return raw
    try:
        return gunzip_bounded(raw, limit)
    except zlib.error:
        return None


# ----------------------------------------------------------------------------------------------------------
# The schema, as data: for each object, its fields with (type check, required). Only what ndfleet reads is typed.

Check = Callable[[Any], bool]


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _dict(v: Any) -> bool:
    return isinstance(v, dict)


def _list(v: Any) -> bool:
    return isinstance(v, list)


def _str_or_null(v: Any) -> bool:
    return v is None or isinstance(v, str)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number_or_null(v: Any) -> bool:
    return v is None or _number(v)


_KIND: dict[Check, str] = {
    _str: "a string", _int: "an integer", _bool: "true or false", _dict: "an object", _list: "a list",
    _str_or_null: "a string or null", _number: "a number", _number_or_null: "a number or null",
}

# field -> (check, required, nested object schema | None, list item schema or check | None)
Schema = dict[str, tuple[Check, bool, "Schema | None", "Schema | Check | None"]]

SKU: Schema = {"name": (_str, False, None, None), "capacity": (_int, False, None, None),
               "tier": (_str, False, None, None)}
OS_PROFILE: Schema = {"customData": (_str, False, None, None)}
VM_PROFILE: Schema = {"osProfile": (_dict, False, OS_PROFILE, None), "userData": (_str, False, None, None)}
INPUTS: Schema = {
    "sku": (_dict, False, SKU, None),
    "tags": (_dict, False, None, None),  # values checked below: strings
    "virtualMachineProfile": (_dict, False, VM_PROFILE, None),
}
RESOURCE: Schema = {
    "type": (_str, True, None, None),
    "name": (_str, True, None, None),
    "parent": (_str_or_null, False, None, None),
    "protect": (_bool, False, None, None),
    "inputs": (_dict, False, INPUTS, None),
    "dependsOn": (_list, False, None, _str),
    "retainOnDelete": (_bool, False, None, None),
}
SUMMARY_ISLAND: Schema = {"name": (_str, True, None, None), "nodes": (_int, True, None, None),
                          "gpus": (_int, False, None, None), "spares": (_int, False, None, None)}
SUMMARY: Schema = {
    "stack": (_str, False, None, None),
    "vmSize": (_str, False, None, None),
    "location": (_str, False, None, None),
    "zone": (_str_or_null, False, None, None),
    "islands": (_list, False, None, SUMMARY_ISLAND),
    "islandCount": (_int, False, None, None),
    "nodes": (_int, False, None, None),
    "gpus": (_int, False, None, None),
    "vcpuQuota": (_dict, False, None, None),
    "warnings": (_list, False, None, _str),
}
# What `ndfleet diff` reads of the plan's cost (ndfleet/cost/estimate.py writes it).
COST: Schema = {
    # null: no VM has a price (docs/plan-json.md, "Unknown cost"); plans before that said 0 with complete false
    "usdPerHour": (_number_or_null, True, None, None),
    "usdPerMonth": (_number_or_null, False, None, None),
    "complete": (_bool, True, None, None),
    "hoursPerMonth": (_int, False, None, None),
}
PLAN: Schema = {
    "schemaVersion": (_int, True, None, None),
    "stack": (_str, False, None, None),
    "resources": (_list, True, None, RESOURCE),
    "outputs": (_dict, False, None, None),
    "summary": (_dict, False, SUMMARY, None),
    "cost": (_dict, False, COST, None),
}


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, (dict, list)) else type(value).__name__
    text = {"dict": "an object", "list": "a list"}.get(text, text)
    return text if len(text) <= 40 else text[:37] + "..."


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check_object(obj: dict[str, Any], schema: Schema, path: str, errors: list[str]) -> None:
    for key, (check, required, nested, items) in schema.items():
        here = _child(path, key)
        if key not in obj:
            if required:
                errors.append(f"{here}: missing; '{key}' must be {_KIND[check]}")
            continue
        value = obj[key]
        if not check(value):
            errors.append(f"{here}: must be {_KIND[check]}, got {_show(value)}")
            continue
        if nested is not None:
            _check_object(value, nested, here, errors)
        if items is not None:
            for i, item in enumerate(value):
                if isinstance(items, dict):
                    if not isinstance(item, dict):
                        errors.append(f"{_child(here, i)}: must be an object, got {_show(item)}")
                    else:
                        _check_object(item, items, _child(here, i), errors)
                elif not items(item):
                    errors.append(f"{_child(here, i)}: must be {_KIND[items]}, got {_show(item)}")


class _UnreadableNumber:
    """Stands in, while parsing, for a JSON number a plan cannot hold, so the check can name its JSON path."""

    def __init__(self, what: str):
        self.what = what


def _bounded_int(text: str) -> int | _UnreadableNumber:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        return _UnreadableNumber(f"an integer of {digits} digits, beyond any 64-bit figure a plan holds")
    return int(text)


def _number_problem(value: Any) -> str | None:
    if isinstance(value, _UnreadableNumber):
        return value.what
    if isinstance(value, float) and not math.isfinite(value):
        shown = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return f"{shown} is not a number a plan holds (only finite numbers; JSON itself has no NaN or Infinity)"
    return None


def _value_problem(doc: Any) -> str | None:
    """The path and problem of the first value nested deeper than MAX_PLAN_DEPTH, or of the first number that is
    not finite (NaN, Infinity, 1e999) or too long to be read; iterative, so any depth is safe."""
    stack: list[tuple[Any, str, int]] = [(doc, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_PLAN_DEPTH:
            return f"{path or '(top)'}: nested more than {MAX_PLAN_DEPTH} levels deep (a plan nests about 10)"
        number = _number_problem(value)
        if number is not None:
            return f"{path or '(top)'}: {number}"
        if isinstance(value, dict):
            stack.extend((v, _child(path, str(k)), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, _child(path, i), depth + 1) for i, v in enumerate(value))
    return None


def validate_plan(doc: Any, source: str = "plan") -> dict[str, Any]:
    """Check that `doc` is an ndfleet plan document of this schemaVersion; return it unchanged. Raises
    PlanFormatError listing every problem, each with its JSON path."""
    if not isinstance(doc, dict):
        raise PlanFormatError(f"{source}: expected a JSON object from `ndfleet plan --format json`, got "
                              f"{_show(doc) if not isinstance(doc, list) else 'a list'}")
    problem = _value_problem(doc)
    if problem is not None:
        raise PlanFormatError(f"{source}: {problem}")
    version = doc.get("schemaVersion")
    if version != PLAN_SCHEMA_VERSION or isinstance(version, bool):
        raise PlanFormatError(f"{source}: schemaVersion is {_show(version) if 'schemaVersion' in doc else 'missing'}; "
                              f"this ndfleet reads schemaVersion {PLAN_SCHEMA_VERSION}")
    errors: list[str] = []
    _check_object(doc, PLAN, "", errors)
    stack = doc.get("stack")
    if isinstance(stack, str) and stack_name_problem(stack) is not None:
        errors.append(f"stack: {stack_name_problem(stack)}")
    if not errors:
        seen: dict[tuple[str, str], int] = {}
        for i, res in enumerate(doc["resources"]):
            key = (res["type"], res["name"])
            if key in seen:
                errors.append(f"resources[{i}]: resource {key[0]} {key[1]} appears twice (first at resources"
                              f"[{seen[key]}])")
            seen.setdefault(key, i)
            inputs = res.get("inputs") or {}
            tags = inputs.get("tags")
            for tag, tag_value in (tags or {}).items():
                if not isinstance(tag_value, str):
                    errors.append(f"resources[{i}].inputs.tags.{tag}: must be a string, got {_show(tag_value)}")
            custom_data = _dig(inputs, CUSTOM_DATA_PATH)
            if isinstance(custom_data, str):
                try:
                    decode_custom_data(custom_data)
                except TooLarge as e:
                    errors.append(f"resources[{i}].inputs.{'.'.join(CUSTOM_DATA_PATH)}: {e}; a node bootstrap is "
                                  "at most 64 KiB, so this is not a plan ndfleet wrote (not decompressed further)")
    if errors:
        shown = errors[:20] + ([f"... and {len(errors) - 20} more"] if len(errors) > 20 else [])
        raise PlanFormatError(f"{source}: not a valid ndfleet plan (schemaVersion {PLAN_SCHEMA_VERSION}):\n"
                              + "\n".join(f"  - {e}" for e in shown))
    return doc


def _dig(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)  # type: ignore[assignment]
    return obj


def read_plan(path: Path) -> dict[str, Any]:
    """Read, parse and validate a plan file, bounded in size and nesting. Raises PlanFormatError."""
    try:
        data = read_regular_file(path, MAX_PLAN_BYTES)
    except NotARegularFile as e:
        raise PlanFormatError(f"{path} is {e.kind}, not a plan file (only a regular file is read)") from None
    except FileNotFoundError:
        raise PlanFormatError(f"plan file not found: {path}") from None
    except OSError as e:
        raise PlanFormatError(f"cannot read plan file {path}: {e.strerror or e}") from None
    if len(data) > MAX_PLAN_BYTES:
        raise PlanFormatError(f"{path} is larger than {MAX_PLAN_BYTES >> 20} MiB: not an ndfleet plan")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PlanFormatError(f"{path} is not UTF-8 text: not an ndfleet plan") from None
    try:
        doc = json.loads(text, parse_int=_bounded_int)
    except json.JSONDecodeError as e:
        raise PlanFormatError(f"{path} is not JSON (line {e.lineno}, column {e.colno}: {e.msg}); expected the "
                              "output of `ndfleet plan --format json`") from None
    except RecursionError:
        raise PlanFormatError(f"{path}: nested more than {MAX_PLAN_DEPTH} levels deep: not an ndfleet plan") from None
    return validate_plan(doc, str(path))

"""A small JSON Schema checker for the keywords ndfleet/status/schema.json uses (jsonschema is not a dependency):
type, enum, minimum, required, properties, additionalProperties: false, items, $ref to #/$defs/... ."""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def problems(value: Any, schema: dict[str, Any], root: dict[str, Any], path: str = "$") -> list[str]:
    """Every place `value` breaks `schema`, as 'path: what'."""
    known = {"$schema", "$id", "title", "description", "$defs", "type", "enum", "minimum", "required", "properties",
             "additionalProperties", "items", "$ref"}
    unknown = set(schema) - known
    assert not unknown, f"schema keyword(s) this checker does not know: {unknown}"
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return problems(value, root["$defs"][name], root, path)
    out: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, k) for k in kinds):
            return [f"{path}: {value!r} is not of type {kinds}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        out.append(f"{path}: {value!r} below {schema['minimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{path}: missing {key!r}" for key in schema.get("required", []) if key not in value]
        if schema.get("additionalProperties") is False:
            out += [f"{path}: unexpected {key!r}" for key in value if key not in props]
        for key, sub in props.items():
            if key in value:
                out += problems(value[key], sub, root, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for n, item in enumerate(value):
            out += problems(item, schema["items"], root, f"{path}[{n}]")
    return out

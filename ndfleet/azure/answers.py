"""What came back, checked by shape before use: JSON that is UTF-8, finite and not nested past what the services
send, and small typed views of the documents the readers use (an ARM list page, an object field, a text field).
Each refusal is an `AnswerShape` naming what was wrong, never a KeyError or a traceback further on."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class AnswerShape(ValueError):
    """An answer of the wrong shape; str() names the service and what was wrong."""


def _refuse_constant(name: str) -> Any:
    raise AnswerShape(f"{name} is not a JSON number")


def json_document(body: bytes, service: str) -> Any:
    """`body` as JSON: UTF-8 (RFC 8259 8.1), no NaN/Infinity, nesting within the parser's recursion limit."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AnswerShape(f"{service} answered text that is not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise AnswerShape(f"{service} answered JSON nested too deeply: refused") from None
    except AnswerShape as exc:
        raise AnswerShape(f"{service} answered something that is not JSON ({exc})") from None
    except ValueError as exc:
        raise AnswerShape(f"{service} answered something that is not JSON ({exc.args[0][:80]})") from None


def json_object(body: bytes, service: str) -> dict[str, Any]:
    doc = json_document(body, service)
    if not isinstance(doc, dict):
        raise AnswerShape(f"{service} answered JSON that is not an object")
    return doc


def field_object(doc: Mapping[str, Any], key: str, what: str) -> Mapping[str, Any]:
    """doc[key] as an object; {} when absent or null; AnswerShape when it is anything else."""
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise AnswerShape(f"{what}: '{key}' is {type(value).__name__}, not an object")
    return value


def field_text(doc: Mapping[str, Any], key: str, what: str) -> str:
    """doc[key] as text; "" when absent or null; AnswerShape when it is anything else."""
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AnswerShape(f"{what}: '{key}' is {type(value).__name__}, not text")
    return value


@dataclass(frozen=True)
class ArmPage:
    """One page of a Resource Manager list (`{"value": [objects], "nextLink": url or absent}`; Microsoft Learn,
    "Azure REST API reference": list operations return `value` and `nextLink`)."""

    value: tuple[dict[str, Any], ...]
    next_link: str | None


def arm_page(doc: Mapping[str, Any], what: str) -> ArmPage:
    value = doc.get("value")
    if value is None:
        value = []
    if not isinstance(value, list):
        raise AnswerShape(f"{what}: the list's 'value' is {type(value).__name__}, not a list")
    for item in value:
        if not isinstance(item, dict):
            raise AnswerShape(f"{what}: the list holds an item that is {type(item).__name__}, not an object")
    link = doc.get("nextLink")
    if link is not None and not isinstance(link, str):
        raise AnswerShape(f"{what}: the list's 'nextLink' is {type(link).__name__}, not a URL")
    return ArmPage(tuple(value), link or None)

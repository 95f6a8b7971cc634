"""`dcgmi diag -r N`: the table (text) and `-j` (JSON; DCGM 3 "DCGM GPU Diagnostic", DCGM 4 "DCGM Diagnostic")."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ndfleet_node.parsers import fail


@dataclass(frozen=True)
class DiagTest:
    name: str
    result: str  # "Pass", "Fail", "Skip", "Warn", ... as DCGM prints it
    detail: str  # GPUs and warnings, when DCGM gives them

    @property
    def failed(self) -> bool:
        return self.result.lower().startswith("fail")


def parse_diag_text(text: str) -> list[DiagTest]:
    tests = []
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or line.lstrip().startswith("+"):
            continue
        name, result = cells[1].strip(), cells[2].strip()
        if not name or name in ("Diagnostic", "Warning", "Info") or name.startswith("-"):
            continue
        word, _, detail = result.partition(" - ")
        if word.split(" ")[0] in ("Pass", "Fail", "Skip", "Warn"):
            tests.append(DiagTest(name, word.strip(), detail.strip()))
    if not tests:
        raise fail("dcgmi diag", text, "no '| test | result |' row")
    return tests


def parse_diag_json(text: str) -> list[DiagTest]:
    try:
        data = json.loads(text[text.find("{") :] if "{" in text else text)
    except (ValueError, RecursionError):
        raise fail("dcgmi diag -j", text, "not JSON") from None
    root = None
    if isinstance(data, dict):
        root = data.get("DCGM GPU Diagnostic", data.get("DCGM Diagnostic"))
    categories = root.get("test_categories") if isinstance(root, dict) else None
    if not isinstance(categories, list):
        raise fail("dcgmi diag -j", text, "no test_categories")
    tests = []
    for category in categories:
        for test in category.get("tests", []) if isinstance(category, dict) else []:
            if not isinstance(test, dict):
                continue
            results = [r for r in test.get("results", []) if isinstance(r, dict)]
            statuses = [str(r.get("status", "?")) for r in results] or ["?"]
            failing = [r for r in results if str(r.get("status", "")).lower().startswith("fail")]
            result = "Fail" if failing else statuses[0]
            details = []
            for r in failing:
                gpus = r.get("gpu_ids", r.get("entity_id", ""))
                warnings = [str(w.get("warning", "")) for w in r.get("warnings", []) if isinstance(w, dict)]
                details.append(f"GPU: {gpus}" + (f" ({'; '.join(warnings)})" if warnings else ""))
            tests.append(DiagTest(str(test.get("name", "?")), result, ", ".join(details)))
    if not tests:
        raise fail("dcgmi diag -j", text, "no tests")
    return tests

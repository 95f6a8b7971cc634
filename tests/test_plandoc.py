"""The plan document's schema and bounded reader: `ndfleet diff` and `ndfleet policy` refuse every malformed plan
with exit 2 and a message naming the JSON path, never a traceback, never an unbounded read or decompression."""

from __future__ import annotations

import base64
import copy
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ndfleet import cli
from ndfleet.plans import plandiff, plandoc
from tests.test_plandiff import load, resource, vmss_inputs

VMSS = "azure-native:compute:VirtualMachineScaleSet"


def bomb(decompressed_bytes: int) -> str:
    """A customData value: base64 of gzip of zeros, tiny compressed, huge decompressed."""
    return base64.b64encode(gzip.compress(bytes(decompressed_bytes), compresslevel=9, mtime=0)).decode()


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(plan: dict[str, Any]) -> None:
        obj: Any = plan
        parts = path.split(".")
        for part in parts[:-1]:
            obj = obj[int(part)] if isinstance(obj, list) else obj[part]
        obj[parts[-1]] = value

    return edit


def _vmss(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(plan: dict[str, Any]) -> None:
        _set(path, value)(resource(plan, VMSS))

    return edit


def _vmss_index() -> int:
    return next(i for i, r in enumerate(load()["resources"]) if r["type"] == VMSS)


# (what is wrong, edit of the recorded dev plan, text the refusal must contain)
BAD_PLANS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("sku a string", _vmss("inputs.sku", "Standard_ND96isr_H100_v5"), "inputs.sku: must be an object, got "),
    ("capacity a string", _vmss("inputs.sku.capacity", "2"), 'inputs.sku.capacity: must be an integer, got "2"'),
    ("capacity a boolean", _vmss("inputs.sku.capacity", True), "inputs.sku.capacity: must be an integer, got true"),
    ("protect a string", _vmss("protect", "false"), 'protect: must be true or false, got "false"'),
    ("summary.islands a number", _set("summary.islands", 3), "summary.islands: must be a list, got 3"),
    ("summary island nodes a string", _set("summary.islands.0.nodes", "2"), "summary.islands[0].nodes: must be an"),
    ("type missing", lambda p: p["resources"][0].pop("type"), "resources[0].type: missing"),
    ("name a number", _set("resources.0.name", 7), "resources[0].name: must be a string, got 7"),
    ("parent a list", _set("resources.0.parent", []), "resources[0].parent: must be a string or null, got a list"),
    ("dependsOn of numbers", _set("resources.0.dependsOn", [1]), "resources[0].dependsOn[0]: must be a string"),
    ("dependsOn a string", _set("resources.0.dependsOn", "x"), "resources[0].dependsOn: must be a list"),
    ("tag value a number", _vmss("inputs.tags.owner", 1), "inputs.tags.owner: must be a string, got 1"),
    ("customData a number", _vmss("inputs.virtualMachineProfile.osProfile.customData", 5), "customData: must be a"),
    (
        "customData a gzip bomb",
        _vmss("inputs.virtualMachineProfile.osProfile.customData", bomb(64 << 20)),
        "customData: decompresses to more than 1024 KiB; a node bootstrap is at most 64 KiB",
    ),
    ("nested 100 deep", _set("outputs.deep", nested(100)), "outputs.deep.a.a"),
    ("schemaVersion a string", _set("schemaVersion", "1"), 'schemaVersion is "1"'),
    ("schemaVersion true", _set("schemaVersion", True), "schemaVersion is true"),
    ("outputs a list", _set("outputs", []), "outputs: must be an object, got a list"),
    ("stack name with a newline", _set("stack", "dev\n## injected"), "stack: stack name of 15 characters is not valid"),
]


@pytest.mark.parametrize(("what", "edit", "message"), BAD_PLANS, ids=[b[0] for b in BAD_PLANS])
def test_validate_plan_refuses_with_the_json_path(what: str, edit: Callable[[dict[str, Any]], None],
                                                  message: str) -> None:
    plan = load()
    edit(plan)
    with pytest.raises(plandoc.PlanFormatError) as info:
        plandoc.validate_plan(plan, "p.json")
    assert message in str(info.value)


@pytest.mark.parametrize(("what", "edit", "message"), BAD_PLANS, ids=[b[0] for b in BAD_PLANS])
def test_diff_and_policy_exit_2_naming_the_path(
    what: str, edit: Callable[[dict[str, Any]], None], message: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(load()))
    plan = load()
    edit(plan)
    bad.write_text(json.dumps(plan))
    for argv in (["diff", str(good), str(bad)], ["diff", str(bad), str(good)], ["policy", str(bad)]):
        assert cli.main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert message in err and "Traceback" not in err and out == ""


def test_the_recorded_plan_and_a_plan_with_depends_on_are_valid() -> None:
    plan = load()
    assert plandoc.validate_plan(copy.deepcopy(plan)) == plan
    plan["resources"][0]["dependsOn"] = ["dev-rg", "dev-vnet"]
    plandoc.validate_plan(plan)


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_json_nested_beyond_any_plan_is_refused_without_a_traceback(
    depth: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"schemaVersion": 1, "resources": [], "outputs": ' + "[" * depth + "]" * depth + "}")
    assert cli.main(["diff", str(path), str(path)]) == 2
    assert cli.main(["policy", str(path)]) == 2
    err = capsys.readouterr().err
    assert "nested more than 64 levels deep" in err and "Traceback" not in err


def test_a_plan_larger_than_the_bound_is_not_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(plandoc, "MAX_PLAN_BYTES", 1024)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(load()))
    assert cli.main(["policy", str(path)]) == 2
    assert "is larger than 0 MiB: not an ndfleet plan" in capsys.readouterr().err


def test_a_binary_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert cli.main(["policy", str(path)]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_gunzip_stops_at_the_bound() -> None:
    data = gzip.compress(bytes(10 << 20))
    with pytest.raises(plandoc.TooLarge):
        plandoc.gunzip_bounded(data, 1 << 20)
    assert plandoc.gunzip_bounded(gzip.compress(b"x" * 1000), 1000) == b"x" * 1000


def test_decode_bootstrap_never_inflates_a_bomb() -> None:
    assert plandiff.decode_bootstrap(bomb(64 << 20)) is None
    assert plandiff.decode_bootstrap(vmss_inputs(load())["virtualMachineProfile"]["osProfile"]["customData"])


def test_the_schema_types_match_what_plan_writes(dev_plan: Any) -> None:
    """The real plan of a stack passes its own schema (and so does its JSON text, read back)."""
    plandoc.validate_plan(json.loads(dev_plan.to_json()))


def test_vmss_index_is_found() -> None:
    assert load()["resources"][_vmss_index()]["type"] == VMSS


def test_plan_folders_with_a_bad_stack_file_name_are_refused(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    for side in ("base", "head"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "dev x.json").write_text(json.dumps(load()))
    assert cli.main(["diff", "--base-dir", str(tmp_path / "base"), "--head-dir", str(tmp_path / "head")]) == 2
    assert "the stack's name is taken from the file name" in capsys.readouterr().err

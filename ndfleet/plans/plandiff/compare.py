"""Comparing two plans: resources matched by (type, name), property paths and values, and the consequences of
each change (the rules table, capacity per island, what management locks block)."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ndfleet_node.names import TAG_ELASTIC

from ndfleet.azure.text import terminal_safe
from ndfleet.cost.month import per_month
from ndfleet.plans.plandiff import bundle
from ndfleet.plans.plandiff.resources import (
    DATA_HOLDING_TYPES,
    HASH_PREFIX_CHARS,
    ISLAND_TAG,
    LOCK_BLOCKED_TYPES,
    LOCK_TYPES,
    LONG_VALUE_CHARS,
    MISSING,
    SEVERITY_RANK,
    Consequence,
    CostChange,
    IslandCapacity,
    PlanCost,
    PropertyChange,
    ResourceChange,
    StackDiff,
)
from ndfleet.plans.plandiff.rules import CONSEQUENCE_RULES, ConsequenceRule
from ndfleet.plans.plandoc import TooLarge, decode_custom_data
from ndfleet.plans.resource_types import (
    AML_FILESYSTEM_TYPE,
    BLOB_CONTAINER_TYPE,
    PRIVATE_ENDPOINT_TYPE,
    ROLE_ASSIGNMENT_TYPE,
    STORAGE_ACCOUNT_TYPE,
    VMSS_TYPE,
)
from ndfleet.stackconfig.profiles import PROFILES

# ----------------------------------------------------------------------------------------------------------
# Reading plans


def _index(plan: Mapping[str, Any] | None) -> dict[tuple[str, str], Mapping[str, Any]]:
    if plan is None:
        return {}
    return {(r["type"], r["name"]): r for r in plan.get("resources", [])}


# ----------------------------------------------------------------------------------------------------------
# Property paths


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _child(path: str, key: str) -> str:
    part = key if _IDENT.match(key) else json.dumps(key)
    if not path:
        return part if _IDENT.match(key) else f"[{part}]"
    return f"{path}.{part}" if _IDENT.match(key) else f"{path}[{part}]"


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _named_items(items: Sequence[Any]) -> bool:
    names = [i.get("name") for i in items if isinstance(i, dict)]
    return (
        len(names) == len(items) > 0 and all(isinstance(n, str) for n in names) and len(set(names)) == len(names)
    )


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """Leaf values by property path. Dicts recurse; a list of named objects recurses by name (`a[nic0].b`),
    another list of objects by index (`a[0].b`); scalars, empty containers and lists of scalars are leaves."""
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        for k in sorted(value):
            out.update(flatten(value[k], _child(path, str(k))))
    elif isinstance(value, list) and value and not all(_is_scalar(v) for v in value):
        if _named_items(value):
            for item in sorted(value, key=lambda i: i["name"]):
                out.update(flatten(item, f"{path}[{item['name']}]"))
        else:
            for i, item in enumerate(value):
                out.update(flatten(item, f"{path}[{i}]"))
    else:
        out[path] = value
    return out


def diff_values(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[PropertyChange, ...]:
    """Every leaf property path whose value differs, sorted by path."""
    a, b = flatten(dict(old)), flatten(dict(new))
    changes = []
    for path in sorted(set(a) | set(b)):
        va, vb = a.get(path, MISSING), b.get(path, MISSING)
        if va is MISSING or vb is MISSING or va != vb or type(va) is not type(vb):
            changes.append(PropertyChange(path, va, vb))
    return tuple(changes)


# ----------------------------------------------------------------------------------------------------------
# Long values and the bootstrap


def decode_bootstrap(value: Any) -> str | None:
    """The cloud-config text inside a customData value (base64, optionally of gzip); None if it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        # Bounded: a plan's customData never decompresses past 1 MiB here (plandoc refuses such plans on reading).
        raw = decode_custom_data(value)
    except TooLarge:
        return None
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def bootstrap_diff(old: Any, new: Any) -> list[str]:
    """The changed lines of the decoded bootstrap, as a unified diff without context; [] if neither decodes."""
    a, b = decode_bootstrap(old), decode_bootstrap(new)
    if a is None and b is None:
        return []
    lines = difflib.unified_diff(
        (a or "").splitlines(), (b or "").splitlines(), "base/customData", "head/customData", n=0, lineterm=""
    )
    return [terminal_safe(line, limit=bundle.MAX_LINE_CHARS, squeeze=False) for line in lines]


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def format_value(value: Any, path: str = "") -> str:
    """A value for display: verbatim when short, else its size and a sha256 prefix (customData: and the size of
    the decoded bootstrap)."""
    if value is MISSING:
        return "(absent)"
    text = _compact(value)
    if len(text) <= LONG_VALUE_CHARS:
        if isinstance(value, str) and "\n" not in value:
            return value
        return json.dumps(value, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:HASH_PREFIX_CHARS]
    decoded = decode_bootstrap(value) if path.endswith("customData") else None
    extra = f", {len(decoded.encode())} bytes decoded" if decoded is not None else ""
    files = bundle.decode_bundle(value) if bundle.is_user_data(path) else None
    if files is not None:
        extra = f", {len(files) - 1} files decoded"
    return f"<{len(text.encode())} bytes{extra}, sha256 {digest}>"


# ----------------------------------------------------------------------------------------------------------
# Consequences and capacity


def _rule_for(resource_type: str, change: PropertyChange) -> ConsequenceRule | None:
    for rule in CONSEQUENCE_RULES:
        if rule.matches(resource_type, change.path) and rule.when(change.old, change.new):
            return rule
    return None


ELASTIC_TAG = TAG_ELASTIC


def _elastic(res: Mapping[str, Any] | None) -> bool:
    tags = res.get("inputs", {}).get("tags") if res is not None else None
    return isinstance(tags, dict) and ELASTIC_TAG in tags


def _island_name(res: Mapping[str, Any]) -> str:
    tags = res.get("inputs", {}).get("tags")
    if isinstance(tags, dict) and isinstance(tags.get(ISLAND_TAG), str):
        return str(tags[ISLAND_TAG])
    return str(res["name"])


def _gpus_per_node(res: Mapping[str, Any], plan: Mapping[str, Any] | None) -> int:
    """GPUs per node: from the plan's summary (islands[].gpus / nodes) when it names the island, else from the
    VM-size profile of sku.name, else 0 (not a known GPU size)."""
    island = _island_name(res)
    summary = (plan or {}).get("summary") or {}
    for entry in summary.get("islands") or []:
        if isinstance(entry, dict) and entry.get("name") == island:
            nodes, gpus = entry.get("nodes"), entry.get("gpus")
            if isinstance(nodes, int) and isinstance(gpus, int) and nodes > 0:
                return gpus // nodes
    sku = res.get("inputs", {}).get("sku") or {}
    profile = PROFILES.get(str(sku.get("name", "")))
    return profile.gpus_per_vm if profile is not None else 0


def _capacity(res: Mapping[str, Any] | None) -> int:
    if res is None:
        return 0
    cap = (res.get("inputs", {}).get("sku") or {}).get("capacity", 0)
    return cap if isinstance(cap, int) and not isinstance(cap, bool) else 0


def short_type(rtype: str) -> str:
    return rtype.split(":", 1)[1] if rtype.startswith("azure-native:") else rtype


def _capacity_and_island_consequences(
    base: Mapping[str, Any] | None,
    head: Mapping[str, Any] | None,
    replaced: frozenset[tuple[str, str]],
) -> tuple[list[IslandCapacity], list[Consequence]]:
    old_idx, new_idx = _index(base), _index(head)
    keys = sorted({k for k in (*old_idx, *new_idx) if k[0] == VMSS_TYPE})
    capacity: list[IslandCapacity] = []
    out: list[Consequence] = []
    for key in keys:
        old_res, new_res = old_idx.get(key), new_idx.get(key)
        any_res = new_res if new_res is not None else old_res
        assert any_res is not None
        island = _island_name(any_res)
        old_n, new_n = _capacity(old_res), _capacity(new_res)
        old_g = old_n * _gpus_per_node(old_res, base) if old_res is not None else 0
        new_g = new_n * _gpus_per_node(new_res, head) if new_res is not None else 0
        cap = IslandCapacity(island, key[1], old_n, new_n, old_g, new_g)
        capacity.append(cap)
        what = f"island {island}: {old_n} -> {new_n} nodes, {old_g} -> {new_g} GPUs"
        if old_res is None:
            out.append(Consequence("island-added", "info", key[0], key[1], f"new {what}"))
        elif new_res is None:
            out.append(Consequence("island-removed", "danger", key[0], key[1],
                                   f"scale set deleted: {what}; running jobs die, local NVMe scratch is lost"))
        elif _elastic(new_res):
            # pulumi up sends the capacity the scale set has when it runs (read live): the plan's is not what runs.
            out.append(Consequence("island-elastic", "info", key[0], key[1],
                                   f"island {island} is elastic: Slurm manages its capacity (pulumi up sends the "
                                   "capacity it reads from Azure, so no VM is added or deleted; docs/elastic.md)",
                                   "sku.capacity"))
            if key in replaced:
                out.append(Consequence("island-replaced", "danger", key[0], key[1],
                                       f"every node of island {island} is recreated"))
        else:
            if key in replaced:
                out.append(Consequence("island-replaced", "danger", key[0], key[1],
                                       f"every node of island {island} is recreated ({old_n} nodes, {old_g} GPUs "
                                       f"before, {new_n} nodes, {new_g} GPUs after)"))
            if new_n > old_n:
                out.append(Consequence("island-scale-out", "info", key[0], key[1],
                                       f"{what} (+{new_n - old_n} nodes, +{new_g - old_g} GPUs)", "sku.capacity"))
            elif new_n < old_n:
                out.append(Consequence("island-scale-in", "warning", key[0], key[1],
                                       f"{what} ({new_n - old_n} nodes, {new_g - old_g} GPUs): nodes are deleted, "
                                       "jobs on them die, local NVMe scratch is lost", "sku.capacity"))
    return capacity, out


def _describe(prop: PropertyChange) -> str:
    """`path: old -> new`; for the bootstrap, how many of its lines change instead of two hashes."""
    if prop.path.endswith("customData"):
        lines = bootstrap_diff(prop.old, prop.new)
        if lines:
            added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
            removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
            return f"{prop.path}: bootstrap {added} lines added, {removed} removed"
    if bundle.is_user_data(prop.path):
        described = bundle.describe(prop.old, prop.new)
        if described is not None:
            return f"{prop.path}: {described}"
    return f"{prop.path}: {format_value(prop.old, prop.path)} -> {format_value(prop.new, prop.path)}"


@dataclass(frozen=True)
class _Lock:
    name: str  # the lock's resource name in the plan
    lock_name: str  # its Azure name
    level: str
    scope: str


def _plan_locks(plan: Mapping[str, Any] | None) -> list[_Lock]:
    """The CanNotDelete / ReadOnly locks of a plan that have a resource-id scope."""
    locks = []
    for (rtype, name), res in _index(plan).items():
        inputs = res.get("inputs") or {}
        scope, level = inputs.get("scope"), inputs.get("level")
        if rtype in LOCK_TYPES and isinstance(scope, str) and scope.startswith("/") and level in (
            "CanNotDelete",
            "ReadOnly",
        ):
            locks.append(_Lock(name, str(inputs.get("lockName") or name), str(level), scope.rstrip("/")))
    return locks


def _lock_type(plan: Mapping[str, Any] | None, name: str) -> str:
    return next((t for (t, n) in _index(plan) if n == name and t in LOCK_TYPES), "")


def _ids_touched(rtype: str, inputs: Mapping[str, Any]) -> list[str]:
    """Resource ids (or id suffixes, starting with '/') whose deletion a delete of this resource implies."""
    ids: list[str] = []
    if rtype == ROLE_ASSIGNMENT_TYPE and isinstance(inputs.get("scope"), str):
        ids.append(inputs["scope"])
    if rtype == PRIVATE_ENDPOINT_TYPE:
        for key in ("privateLinkServiceConnections", "manualPrivateLinkServiceConnections"):
            for conn in inputs.get(key) or []:
                if isinstance(conn, dict) and isinstance(conn.get("privateLinkServiceId"), str):
                    ids.append(conn["privateLinkServiceId"])
    if rtype in (BLOB_CONTAINER_TYPE, STORAGE_ACCOUNT_TYPE) and isinstance(inputs.get("accountName"), str):
        ids.append(f"/storageAccounts/{inputs['accountName']}")
    if rtype == AML_FILESYSTEM_TYPE and isinstance(inputs.get("amlFilesystemName"), str):
        ids.append(f"/amlFilesystems/{inputs['amlFilesystemName']}")
    return ids


def _under(resource_id: str, scope: str) -> bool:
    """Whether a lock on `scope` covers `resource_id` (a full id, or a suffix such as /storageAccounts/<name>)."""
    rid, scope = resource_id.lower().rstrip("/"), scope.lower()
    if rid.startswith("/subscriptions/"):
        return rid == scope or rid.startswith(scope + "/")
    return scope.endswith(rid)


def _locked_consequences(
    changes: Sequence[ResourceChange], replaced: frozenset[tuple[str, str]], base: Mapping[str, Any] | None
) -> list[Consequence]:
    """A delete or replace that a lock of the base plan blocks: say so, and how to proceed. A lock that the same
    change deletes is left out: Pulumi deletes it before what it guards (it depends on it), and `lock-removed`
    already says so."""
    deleted = {ch.key for ch in changes if ch.op == "delete"}
    locks = [lk for lk in _plan_locks(base) if (_lock_type(base, lk.name), lk.name) not in deleted]
    if not locks:
        return []
    old_idx = _index(base)
    out = []
    for ch in changes:
        if ch.type not in LOCK_BLOCKED_TYPES or not (ch.op == "delete" or ch.key in replaced):
            continue
        inputs = (old_idx.get(ch.key) or {}).get("inputs") or {}
        touched = _ids_touched(ch.type, inputs)
        lock = next((lk for lk in locks if any(_under(i, lk.scope) for i in touched)), None)
        if lock is None:
            continue
        verb = "deleted" if ch.op == "delete" else "replaced (deleted, then created)"
        out.append(Consequence(
            "locked-replace", "danger", ch.type, ch.name,
            f"{short_type(ch.type)} {verb} under the {lock.level} lock {lock.lock_name} on {lock.scope}: Azure "
            "refuses the delete (ScopeLocked) and `pulumi up` stops half-way. To proceed: `az lock delete --ids "
            f"{lock.scope}/providers/Microsoft.Authorization/locks/{lock.lock_name}`, `pulumi refresh` (Pulumi sees "
            "the lock gone), `pulumi up` (it makes the change and creates the lock again); or keep the old value",
        ))
    return out


def replaced_keys(changes: Sequence[ResourceChange]) -> frozenset[tuple[str, str]]:
    """The updated resources that a `replace` rule of the table fires on: Azure or Pulumi deletes and recreates
    them. The one rule behind both the replace count and the consequences that say "recreated"."""
    return frozenset(
        ch.key
        for ch in changes
        if ch.op == "update"
        and any((rule := _rule_for(ch.type, prop)) is not None and rule.effect == "replace" for prop in ch.properties)
    )


def consequences_for(
    changes: Sequence[ResourceChange],
    base: Mapping[str, Any] | None = None,
    head: Mapping[str, Any] | None = None,
) -> tuple[tuple[Consequence, ...], tuple[IslandCapacity, ...]]:
    """The consequences of `changes` (and the per-island capacity), most severe first."""
    out: list[Consequence] = []
    replaced = replaced_keys(changes)
    for ch in changes:
        if ch.op == "update":
            grouped: dict[str, tuple[ConsequenceRule, list[PropertyChange]]] = {}
            for prop in ch.properties:
                rule = _rule_for(ch.type, prop)
                if rule is None:
                    continue
                if rule.grouped:
                    grouped.setdefault(rule.id, (rule, []))[1].append(prop)
                    continue
                out.append(Consequence(rule.id, rule.severity, ch.type, ch.name,
                                       f"{_describe(prop)}: {rule.what}", prop.path))
            for rule, props in grouped.values():
                described = "; ".join(_describe(p) for p in props)
                out.append(Consequence(rule.id, rule.severity, ch.type, ch.name, f"{described}: {rule.what}",
                                       rule.path))
            if ch.type in DATA_HOLDING_TYPES and ch.old_protect and not ch.new_protect:
                out.append(Consequence("protect-removed", "warning", ch.type, ch.name,
                                       "Pulumi protect is turned off: `pulumi up` may now delete it"))
        if ch.type in LOCK_TYPES and ch.op == "delete":
            out.append(Consequence("lock-removed", "warning", ch.type, ch.name,
                                   "management lock deleted: Azure no longer blocks deleting what it guards"))
        if ch.type in DATA_HOLDING_TYPES:
            if ch.op == "delete":
                out.append(Consequence("data-deleted", "danger", ch.type, ch.name,
                                       f"{short_type(ch.type)} deleted: the data it holds is lost"))
            elif ch.key in replaced:
                out.append(Consequence("data-replaced", "danger", ch.type, ch.name,
                                       f"{short_type(ch.type)} replaced (deleted, then created empty): the data it "
                                       "holds is lost"))
    out.extend(_locked_consequences(changes, replaced, base))
    capacity, island = _capacity_and_island_consequences(base, head, replaced)
    out.extend(island)
    out.sort(key=lambda c: (SEVERITY_RANK[c.severity], c.resource_type, c.resource_name, c.rule, c.path or ""))
    return tuple(out), tuple(capacity)


# ----------------------------------------------------------------------------------------------------------
# Diffing


def diff_plans(base: Mapping[str, Any] | None, head: Mapping[str, Any] | None, stack: str | None = None) -> StackDiff:
    """Compare two plans of one stack; either may be None (a stack present on one side only)."""
    if base is None and head is None:
        raise ValueError("diff_plans needs at least one plan")
    base, head = bundle.with_vault_bundles(base, decode_bootstrap), bundle.with_vault_bundles(head, decode_bootstrap)
    name = stack or str((head or base or {}).get("stack") or "stack")
    old_name, new_name = (base or {}).get("stack"), (head or {}).get("stack")
    if stack is None and old_name and new_name and old_name != new_name:  # `ndfleet diff --allow-different-stacks`
        name = f"{old_name} -> {new_name}"
    old_idx, new_idx = _index(base), _index(head)
    changes: list[ResourceChange] = []
    for key in sorted(set(old_idx) | set(new_idx)):
        old, new = old_idx.get(key), new_idx.get(key)
        if old is None:
            assert new is not None
            changes.append(ResourceChange(key[0], key[1], "create", new_protect=bool(new.get("protect"))))
        elif new is None:
            # retain_on_delete (the bundle's parts): Pulumi forgets the resource and Azure keeps it.
            op = "retain" if old.get("retainOnDelete") else "delete"
            changes.append(ResourceChange(key[0], key[1], op, old_protect=bool(old.get("protect"))))
        else:
            props = diff_values(old.get("inputs") or {}, new.get("inputs") or {})
            old_p, new_p = bool(old.get("protect")), bool(new.get("protect"))
            parent_changed = old.get("parent") != new.get("parent")
            if parent_changed:
                props = (PropertyChange("(parent)", old.get("parent"), new.get("parent")), *props)
            if old_p != new_p:
                props = (PropertyChange("(protect)", old_p, new_p), *props)
            if props:
                changes.append(ResourceChange(key[0], key[1], "update", props, old_p, new_p))
    consequences, capacity = consequences_for(changes, base, head)
    outputs = diff_values((base or {}).get("outputs") or {}, (head or {}).get("outputs") or {})
    cost = CostChange(plan_cost(base), plan_cost(head))
    return StackDiff(name, tuple(changes), consequences, capacity, outputs, base is not None, head is not None,
                     replaced_keys(changes), cost)


def plan_cost(plan: Mapping[str, Any] | None) -> PlanCost | None:
    """The plan's VM cost per hour and month (its `cost`, which plandoc checked holds finite numbers or null); None
    when the plan has none. A stack on one side only costs nothing on the other."""
    if plan is None:
        return PlanCost(0.0, True, 0.0)
    cost = plan.get("cost")
    if not isinstance(cost, Mapping) or "usdPerHour" not in cost:
        return None
    complete = cost.get("complete") is True
    hourly, monthly = cost.get("usdPerHour"), cost.get("usdPerMonth")
    if not isinstance(hourly, (int, float)) or (not hourly and not complete):  # unknown (0.0: an older plan's)
        return PlanCost(None, complete, None)
    if not isinstance(monthly, (int, float)):  # an older plan without it: the month of its rounded hour
        monthly = per_month(float(hourly))
    return PlanCost(float(hourly), complete, float(monthly))


def diff_stacks(
    bases: Mapping[str, Mapping[str, Any]], heads: Mapping[str, Mapping[str, Any]]
) -> list[StackDiff]:
    """Diff every stack found on either side, in name order; a stack on one side only is all-added/all-removed."""
    return [diff_plans(bases.get(s), heads.get(s), s) for s in sorted(set(bases) | set(heads))]



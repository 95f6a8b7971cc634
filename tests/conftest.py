"""Shared fixtures and small assertion helpers for the Pulumi mock-runtime tests."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ndfleet.plans import resource_types as rt
from ndfleet.plans.build import Plan, PlannedResource, run_plan
from ndfleet.stackconfig.stackfile import StackFile

# The system tools the suite runs for real: skipped with one summary line when missing, failed under CI.
pytest_plugins = ("tests.system_tools",)

REPO = Path(__file__).resolve().parent.parent
STACKS_DIR = REPO / "stacks"
# The example stacks ndfleet ships, the only ones the tests hold to example rules (the example key, the documented
# sizes): a user's own stacks/Pulumi.<name>.yaml beside them (as the README suggests) is none of the tests' business.
EXAMPLE_STACKS = ("dev", "elastic", "h200", "prod")


def example_stack_files(stacks_dir: Path = STACKS_DIR) -> list[Path]:
    """The example stacks' files in `stacks_dir`, whatever else the folder holds."""
    return [stacks_dir / f"Pulumi.{name}.yaml" for name in EXAMPLE_STACKS]

# The resource types, short names for the tests (one definition: ndfleet.plans.resource_types).
VMSS, VNET, SUBNET, NSG = rt.VMSS_TYPE, rt.VNET_TYPE, rt.SUBNET_TYPE, rt.NSG_TYPE
PIP, NAT, BASTION = rt.PUBLIC_IP_TYPE, rt.NAT_GATEWAY_TYPE, rt.BASTION_TYPE
ACCOUNT, CONTAINER, BLOB_SERVICE = rt.STORAGE_ACCOUNT_TYPE, rt.BLOB_CONTAINER_TYPE, rt.BLOB_SERVICE_TYPE
LOCK, ROLE, IDENTITY, PPG = rt.LOCK_BY_SCOPE_TYPE, rt.ROLE_ASSIGNMENT_TYPE, rt.IDENTITY_TYPE, rt.PPG_TYPE
LUSTRE, PRIVATE_ENDPOINT, RESOURCE_GROUP = rt.AML_FILESYSTEM_TYPE, rt.PRIVATE_ENDPOINT_TYPE, rt.RESOURCE_GROUP_TYPE


def dev_ssh_key() -> str:
    doc = yaml.safe_load((STACKS_DIR / "Pulumi.dev.yaml").read_text())
    return str(doc["config"]["ndfleet:sshPublicKey"])


def base_config(**overrides: Any) -> dict[str, Any]:
    """A minimal valid stack config (namespace stripped); overrides replace top-level keys."""
    config: dict[str, Any] = {"location": "eastus", "nodes": 2, "sshPublicKey": dev_ssh_key()}
    config.update(overrides)
    return config


def stack_from(config: dict[str, Any], name: str = "test") -> StackFile:
    """A StackFile as `load_stack` would build it, from a dict of `ndfleet:*` keys (namespace left out)."""
    return StackFile.from_config(name, Path(f"Pulumi.{name}.yaml"), config)


@functools.lru_cache(maxsize=64)
def _cached_plan(config_json: str, name: str) -> Plan:
    return run_plan(stack_from(json.loads(config_json), name))


def plan_of(config: dict[str, Any], name: str = "test") -> Plan:
    """Plan a config under the mock runtime (cached: the tests only read plans)."""
    return copy.deepcopy(_cached_plan(json.dumps(config, sort_keys=True), name))


def of_type(plan: Plan, typ: str) -> list[PlannedResource]:
    return sorted((r for r in plan.resources if r.type == typ), key=lambda r: r.name)


def one(plan: Plan, typ: str, name_contains: str = "") -> PlannedResource:
    found = [r for r in of_type(plan, typ) if name_contains in r.name]
    assert len(found) == 1, f"expected one {typ} matching {name_contains!r}, found {[r.name for r in found]}"
    return found[0]


def dig(obj: Any, path: str) -> Any:
    """dig(inputs, "virtualMachineProfile.osProfile.adminUsername"); list items by index: "a.0.b"."""
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


@pytest.fixture(scope="session")
def dev_plan() -> Plan:
    return plan_of(base_config(bastion=True, tags={"owner": "tests"}), "dev")


@pytest.fixture(scope="session")
def zonal_lustre_plan() -> Plan:
    return plan_of(
        base_config(nodes=250, zone="2", storage={"lustre": {"sku": "AMLFS-Durable-Premium-500", "capacityTiB": 16}}),
        "prod",
    )


# --- the twin (tests/twin): booted machines, collected only when asked for ----------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--twin", action="store_true", default=False,
        help="boot the twin (tests/twin); needs real root in namespaces of its own: "
        "`unshare --net --mount --pid --fork --mount-proc pytest --twin tests/twin`",
    )  # fmt: skip


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # The unit suite runs under `unshare -rn` (a user namespace), where containers cannot boot; the twin is its own
    # run (.ci/run runs both), so without --twin its folder is not collected at all rather than skipped.
    if collection_path.name == "twin" and collection_path.parent.name == "tests":
        return not config.getoption("--twin")
    return None

"""Issue 47 item 1: any sequence of deployments of a Slurm stack's bundle must be deployable, a revert included.

A small model of how `pulumi up` with pulumi-azure-native meets Azure, driven by the real plans of the dev stack
(ndfleet plan, the mock runtime), for the two resource types the bundle's Key Vault parts are made of:

- a resource that is in the program but not in the stack's state is created; pulumi-azure-native checks first
  whether its Azure id exists and refuses to create it when it does (the error asks to import it) (pulumi-azure-native
  provider/pkg/provider/provider.go, Create: the existence check before the PUT; citation not re-read at a tag here:
  docs/bootstrap.md says what a real vault still has to confirm);
- a role assignment is created under a new name (azure-native names it with a fresh GUID); Azure answers
  409 RoleAssignmentExists when one with the same principal, role and scope already exists under another name
  (Microsoft Learn, "Troubleshoot Azure RBAC": RoleAssignmentExists);
- a resource in the state and in the program is updated in place (a Key Vault secret: a new version);
- a resource in the state that left the program is deleted in Azure, unless retain_on_delete: it stays in Azure and
  leaves the state.

Azure ids: a secret's is its vault (one per stack) and name; a role assignment's identity for the 409 is its
principal, role and scope (the secret it depends on in the plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.test_plandiff_stacks import dev_plan, edited_dev_plan

SECRET = "azure-native:keyvault:Secret"
GRANT = "azure-native:authorization:RoleAssignment"
H200 = "Standard_ND96isr_H200_v5"


class CreateRefused(Exception):
    pass


@dataclass
class Azure:
    secrets: dict[str, list[str]] = field(default_factory=dict)  # secret name -> its versions' values
    grants: set[tuple[str, str, str]] = field(default_factory=set)  # (principal, role, scope secret)
    state: dict[str, Any] = field(default_factory=dict)  # the stack's state: resource name -> its Azure identity

    def up(self, plan: dict[str, Any]) -> None:
        resources = {r["name"]: r for r in plan["resources"] if r["type"] in (SECRET, GRANT)}
        by_name = {r["name"]: r for r in plan["resources"]}
        for name, r in resources.items():
            if r["type"] == SECRET:
                secret = r["inputs"]["secretName"]
                value = str((r["inputs"].get("properties") or {}).get("value"))
                if name not in self.state and secret in self.secrets:
                    raise CreateRefused(f"{name}: secret {secret} already exists (import it)")
                versions = self.secrets.setdefault(secret, [])
                if not versions or versions[-1] != value:
                    versions.append(value)
                self.state[name] = ("secret", secret)
            else:
                (scope,) = [by_name[d]["inputs"]["secretName"] for d in r.get("dependsOn", ())
                            if d in by_name and by_name[d]["type"] == SECRET and d in resources
                            and by_name[d]["inputs"]["secretName"] not in
                            ("munge-key", "slurmdbd-password")]  # fmt: skip
                key = (str(r["inputs"]["principalId"]), str(r["inputs"]["roleDefinitionId"]), scope)
                if name not in self.state:
                    if key in self.grants:
                        raise CreateRefused(f"{name}: 409 RoleAssignmentExists on {scope}")
                    self.grants.add(key)
                self.state[name] = ("grant", key)
        for name in [n for n in self.state if n not in resources]:
            kind, ident = self.state.pop(name)
            previous = next((r for r in self._last if r["name"] == name), {})
            if not previous.get("retainOnDelete"):
                (self.secrets.pop if kind == "secret" else self.grants.discard)(ident)
        self._last = list(resources.values())

    _last: list[dict[str, Any]] = field(default_factory=list)


def bundle_only(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan's bundle secrets and the role assignments on them (the munge key's and others are not modelled)."""
    keep = [r for r in plan["resources"]
            if (r["type"] == SECRET and str(r["inputs"].get("secretName", "")).startswith("ndfleet-bundle-"))
            or (r["type"] == GRANT and "-ndfleet-bundle-" in r["name"])]  # fmt: skip
    return {"resources": keep}


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp: Path = tmp_path_factory.mktemp("replay")
    return {"A": bundle_only(dev_plan()), "B": bundle_only(edited_dev_plan(tmp, vmSize=H200))}


@pytest.mark.parametrize("sequence", ["ABA", "ABAB", "ABBA", "AABBAA"])
def test_any_sequence_of_bundles_deploys_and_nothing_piles_up(plans, sequence):
    assert plans["A"] != plans["B"]  # the setting changes the bundle
    azure = Azure()
    for step in sequence:
        azure.up(plans[step])  # raises CreateRefused on the hash-named design's revert
    # Nothing accumulates: as many secrets and role assignments as one deployment has.
    secrets = [r for r in plans[sequence[-1]]["resources"] if r["type"] == SECRET]
    grants = [r for r in plans[sequence[-1]]["resources"] if r["type"] == GRANT]
    assert len(azure.secrets) == len(secrets) and len(azure.grants) == len(grants)


def test_the_model_refuses_a_create_of_what_exists(plans):
    """The model can fail: a second stack state writing into the same vault (a lost state) is refused."""
    azure = Azure()
    azure.up(plans["A"])
    azure.state.clear()
    with pytest.raises(CreateRefused, match="already exists|RoleAssignmentExists"):
        azure.up(plans["A"])

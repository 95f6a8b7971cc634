"""The twin boots exactly the prepared boot data: what its plan reader (tests/twin/plan.py, which reads `ndfleet plan`
JSON and boots no machine) hands each machine is the value ndfleet.prepare built, the one `ndfleet render` writes."""

from __future__ import annotations

import base64
from pathlib import Path

from ndfleet.plans.build import run_plan
from ndfleet.prepare import prepare_config
from ndfleet.stackconfig.stackfile import load_stack
from tests.twin import plan as twin_plan

TWIN_STACK = Path(__file__).resolve().parent / "twin" / "Pulumi.twin.yaml"


def test_the_twins_machines_boot_the_prepared_values(tmp_path: Path) -> None:
    stack = load_stack(path=TWIN_STACK)
    prepared = prepare_config(stack.ndfleet_config, stack.name, stack.engine_config)
    path = tmp_path / "plan.json"
    path.write_text(run_plan(stack).to_json())
    machines = twin_plan.load(path)

    slurm = [m for m in machines.machines if m.role in ("controller", "login")]
    assert {m.role for m in slurm} == {"controller", "login"}
    for m in slurm:
        boot = prepared.slurm_machine(m.role)
        assert m.custom_data == base64.b64decode(boot.custom_data) and m.user_data == boot.user_data
    islands = {p.island.name: p.bootstrap for p in prepared.islands}
    compute = machines.by_role("compute")
    assert compute and {m.island for m in compute} <= set(islands)
    for m in compute:
        bootstrap = islands[str(m.island)]
        assert m.custom_data == base64.b64decode(bootstrap.custom_data)
        assert m.user_data == (bootstrap.vm_user_data or None)
    # The compute bundle's parts the twin's Key Vault stand-in serves: the prepared slots, every one.
    assert prepared.vault_slots
    assert {k: machines.vault_secrets[k] for k in prepared.vault_slots} == dict(prepared.vault_slots)

"""Every figure README.md and docs/*.md quote that the code determines is computed here from the code and looked
for in the sentence or table row that quotes it: a change to the code that moves a figure fails until the page says
the new one. Text is compared with line breaks and runs of spaces collapsed, so rewrapping a paragraph is free."""

from __future__ import annotations

import functools
import gzip
import lzma
import re
from pathlib import Path

import pytest

from ndfleet.machine_files import COMPUTE, MachineFiles, machine_files
from ndfleet.monitoring import exporters
from ndfleet.monitoring.alerts import alerts, island_capacity_floor
from ndfleet.monitoring.budget import budget as series_budget
from ndfleet.monitoring.cost import estimate
from ndfleet.nodefiles import nodebundle
from ndfleet.nodefiles.bootstrap import USER_DATA_MAX_BYTES, validation_budget_s
from ndfleet.preflight.facts import ImageVersions
from ndfleet.preflight.images import check_image_version
from ndfleet.prepare import PreparedCluster, default_probe_grace_period_s, prepare_config
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.profiles import PROFILES
from ndfleet.stackconfig.settings import AZURE_MAX_PRIVATE_IPS_PER_VNET, MAX_NODES
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import EXAMPLE_STACKS, base_config
from tests.test_validator import FAULTS

REPO = Path(__file__).resolve().parents[2]
H100 = "Standard_ND96isr_H100_v5"


@functools.cache
def page(name: str) -> str:
    """The page's text with every run of whitespace collapsed to one space."""
    return " ".join((REPO / name).read_text(encoding="utf-8").split())


def says(name: str, text: str) -> None:
    assert text in page(name), f"{name} should say: {text}"


@functools.cache
def prepared(stack: str) -> PreparedCluster:
    s = load_stack(name=stack)
    return prepare_config(s.ndfleet_config, s.name, s.engine_config)


def compute_machines() -> list[MachineFiles]:
    return [m for s in EXAMPLE_STACKS for m in machine_files(prepared(s)) if m.kind == COMPUTE]


def kb(size: int) -> str:
    """Bytes as the pages write them: kilobytes of 1,000 bytes, one decimal."""
    return f"{size / 1000:.1f}"


def budget(**health: object) -> int:
    return validation_budget_s(load_spec(base_config(health=health), "figures"))


# --- README.md: the example stacks ------------------------------------------------------------------------------
def stack_row(spec: ClusterSpec) -> str:
    """The README's row for an example stack, every cell from the validated stack."""
    islands = "/".join(str(i.nodes) for i in spec.islands) if len(spec.islands) > 1 else "1"
    notes = []
    if spec.scheduler == "slurm" and spec.slurm is not None:
        logins = spec.slurm.login_count
        notes.append(f"Slurm ({logins} login node{'s' if logins > 1 else ''})")
    else:
        notes.append("no Slurm")
    elastic = [i for i in spec.islands if i.elastic is not None]
    if elastic:
        notes.append("elastic " + ", ".join(f"`{i.name}` (up to {i.nodes})" for i in elastic))
    notes.append("Bastion" if spec.bastion else "no Bastion")
    notes.append("monitoring" if spec.monitoring.enabled else "no monitoring")
    if spec.zone:
        notes.append(f"zone {spec.zone}")
    if spec.storage.lustre is not None:
        notes.append(f"Managed Lustre {spec.storage.lustre.capacity_tib} TiB {spec.storage.lustre.sku.name}")
    size = spec.profile.series.replace("NDH100v5", "ND H100 v5").replace("NDH200v5", "ND H200 v5")
    return f"| `{spec.stack}` | {size} | {spec.total_nodes:,} ({islands}) | {spec.total_gpus:,} | {', '.join(notes)} |"


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_readme_example_stack_row(stack: str) -> None:
    says("README.md", stack_row(prepared(stack).spec))


def cost_row(stack: str) -> str:
    """docs/cost.md's row for an example stack: its VMs, priced by `ndfleet cost` in the stack's own region."""
    from ndfleet.cost.estimate import estimate_cost
    from ndfleet.cost.money import usd

    spec = prepared(stack).spec
    cost = estimate_cost(spec)
    assert cost.missing == [], cost.missing  # an example stack is priced in full
    gpus = sum(i.group.count for i in cost.items if i.group.gpu)
    others = sum(i.group.count for i in cost.items if not i.group.gpu)
    vms = f"{gpus:,} x {spec.profile.name}" + (f" + {others} Slurm" if others else "")
    return f"| `{stack}` | {spec.location} | {vms} | {usd(cost.usd_per_hour)} | {usd(cost.usd_per_month)} |"


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_cost_page_prices_each_example_in_its_own_region(stack: str) -> None:
    says("docs/cost.md", cost_row(stack))


def test_cost_page_region_table_is_the_price_table() -> None:
    """Every region with an ND figure, each cell the table's figure, "no meter" where the table records none."""
    from ndfleet.cost.prices import missing_meter, table_price, table_regions

    sizes = ("Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_D8s_v5")

    def cell(size: str, region: str) -> str:
        found = table_price(size, region)
        return f"{found.usd_per_hour:.3f}" if found else ("no meter" if missing_meter(size, region) else "-")

    regions = sorted(set(table_regions(sizes[0])) | set(table_regions(sizes[1])))
    assert len(regions) == 36
    rows = [f"| {r} | {' | '.join(cell(s, r) for s in sizes)} |" for r in regions]
    table = re.findall(r"^\| [a-z0-9]+ \| [^\n]*\|$", (REPO / "docs/cost.md").read_text(), re.M)
    assert [row for row in table if row.split(" | ")[0][2:] in regions] == rows


def test_readme_quotes_what_ndfleet_cost_prices_dev_prod_and_h200_at() -> None:
    """The README's cost sentence: each stack's VMs, priced by the tool in the stack's own region."""
    from ndfleet.cost.estimate import estimate_cost
    from ndfleet.cost.money import usd

    quoted = []
    for stack in ("dev", "prod", "h200"):
        spec = prepared(stack).spec
        cost = estimate_cost(spec)
        vms = sum(i.group.count for i in cost.items)
        quoted.append(f"`{stack}`'s {vms:,} VMs ({spec.location}) at {usd(cost.usd_per_hour)}")
    dev, prod, h200 = quoted
    says("README.md", f"`ndfleet cost` prices {dev} per hour, {prod} and {h200}, and a node costs")


def test_bootstrap_customdata_size_of_every_example_stack() -> None:
    largest = max(m.custom_data_bytes for m in compute_machines())
    says("docs/bootstrap.md", f"at most {kb(largest)} KB of Azure's 64 KB limit for every example stack")


def test_bootstrap_userdata_size_of_every_example_stack() -> None:
    largest = max(m.user_data_bytes for m in compute_machines())
    assert USER_DATA_MAX_BYTES - largest >= USER_DATA_MAX_BYTES / 5  # "at least a fifth to spare"
    spare = "at least a fifth to spare"
    says("docs/bootstrap.md", f"(also 64 KB; at most {kb(largest)} KB for every example stack, {spare})")


def test_bootstrap_validation_budgets() -> None:
    full1, quick = budget(validationLevel="full", dcgmLevel=1), budget(validationLevel="quick")
    full2, full3 = budget(dcgmLevel=2), budget(dcgmLevel=3)
    setup = PROFILES[H100].thresholds.setup_timeout_s
    says(
        "docs/bootstrap.md",
        f"{setup} s of set-up plus every check at its time limit, {full1:,} s (about "
        f"{round(full1 / 60)} minutes) at the default `validationLevel: full`, `dcgmLevel: 1`; "
        f"{quick:,} s at `quick`; {full2:,} s and {full3:,} s with `dcgmLevel` 2 and 3",
    )
    says("docs/bootstrap.md", f"({default_probe_grace_period_s(full1):,} s at the defaults; see above)")


def test_deploying_smoke_deployment_wait() -> None:
    smoke = prepared("prod-smoke").spec
    wait = validation_budget_s(smoke)
    dcgm = smoke.health.dcgm_level
    says("docs/deploying.md", f"(at most {wait:,} s, about {round(wait / 60)} minutes, at dcgmLevel {dcgm})")
    prod = prepared("prod").spec
    says("docs/guide.md", f"within {wait:,} s (about {round(wait / 60)} minutes) once Azure has started it, against "
         f"{validation_budget_s(prod):,} s for prod's `dcgmLevel: {prod.health.dcgm_level}`")  # fmt: skip
    says("docs/smoke.md", f"{wait:,} s (about {round(wait / 60)} minutes) at `full` with DCGM level 1")


def test_smoke_stack_figures() -> None:
    from ndfleet.cost.estimate import estimate_cost
    from ndfleet.plans.build import run_plan

    smoke, prod = run_plan(load_stack(name="prod-smoke")), run_plan(load_stack(name="prod"))
    azure = sum(1 for r in smoke.resources if not r.type.startswith("ndfleet:"))
    assert azure == sum(1 for r in prod.resources if not r.type.startswith("ndfleet:"))
    says("docs/deploying.md", f"the same {azure} Azure resources as prod, {smoke.spec.total_nodes} nodes")
    cost = estimate_cost(smoke.spec)
    says("docs/smoke.md", f"US${cost.usd_per_hour:,.2f} per hour, US${cost.usd_per_run or 0:,.2f} for "
         f"{cost.run_hours:g} hours")  # fmt: skip
    lustre = smoke.spec.storage.lustre
    assert lustre is not None
    says("docs/smoke.md", f"({lustre.capacity_tib} TiB for {lustre.sku.name})")


def test_configuration_node_bound() -> None:
    bound = f"`nodes + ceil(0.2 x nodes) <= {AZURE_MAX_PRIVATE_IPS_PER_VNET:,}` gives at most {MAX_NODES:,}"
    says("docs/configuration.md", bound)
    says("docs/configuration.md", f"| 1-{MAX_NODES:,} total VMs")


def test_architecture_island_split_example() -> None:
    spec = load_spec(base_config(nodes=250), "figures")
    split = "/".join(str(i.nodes) for i in spec.islands)
    says("docs/architecture.md", f"(250 -> {split})")


def test_monitoring_summary_figures() -> None:
    cost = estimate(prepared("prod").spec)
    b = series_budget(prepared("prod").spec)
    kinds = len({a.name for a in alerts(prepared("prod").spec)})
    says("docs/monitoring.md", f"Azure evaluates {kinds} kinds of alert")
    # One figure for the stack's samples per minute, its nodes' and the Slurm controller's, as `plan` prints it
    # (budget.plan_lines), `ndfleet monitoring` too, and the ingestion bill is priced from (budget.cost_markdown).
    says(
        "docs/monitoring.md",
        f"(about {cost.series_per_node:,} series per node, {b.events_per_minute:,.0f} samples/min for the prod stack "
        f"with its Slurm controller; one workspace holds about {b.max_nodes:,} such nodes at its default limits)",
    )


def test_injected_fault_count() -> None:
    says("docs/bootstrap.md", f"each of {len(FAULTS)} injected faults")


# --- docs/bootstrap.md ------------------------------------------------------------------------------------------
def prod_compute() -> list[MachineFiles]:
    return [m for m in machine_files(prepared("prod")) if m.kind == COMPUTE]


def test_bootstrap_table_sizes_for_prod() -> None:
    custom = max(m.custom_data_bytes for m in prod_compute())
    says("docs/bootstrap.md", f"| {kb(custom)} KB of 64 KB (was 51.3 KB) |")
    bundle = prepared("prod").islands[0].bootstrap
    assert max(m.user_data_bytes for m in prod_compute()) == 0  # prod runs Slurm: its bundle is in the vault
    says("docs/bootstrap.md", f"| prod: {kb(len(bundle.bundle))} KB in {len(bundle.bundle_parts)} Key Vault parts; "
                              f"h200 (no Slurm): {kb(prepared('h200').islands[0].bootstrap.user_data_bytes)} KB of "
                              "64 KB in userData |")  # fmt: skip


@pytest.mark.parametrize("stack", ["dev", "prod", "elastic"])
def test_bootstrap_controller_table_now_columns(stack: str) -> None:
    # "The Slurm controller's library travels in its userData too": | stack | customData before | now | userData
    # before | now |; the "before" columns are history (main before the move), the "now" ones the code's.
    (controller,) = [m for m in machine_files(prepared(stack)) if m.kind == "slurm-controller"]
    row = re.search(rf"^\| `{stack}` \|(.*)\|$", (REPO / "docs/bootstrap.md").read_text(encoding="utf-8"), re.M)
    assert row, f"docs/bootstrap.md has no controller row for {stack}"
    cells = [c.strip() for c in row.group(1).split("|")]
    assert (cells[1], cells[3]) == (f"{controller.custom_data_bytes:,}", f"{controller.user_data_bytes:,}"), stack


def test_bootstrap_xz_against_gzip_for_the_prod_bundle() -> None:
    bundle = prepared("prod").islands[0].bootstrap.bundle
    gz = gzip.compress(lzma.decompress(bundle), compresslevel=9, mtime=0)
    says("docs/bootstrap.md", f"xz gives {kb(len(bundle))} KB where gzip gives {kb(len(gz))} KB for the prod bundle")


def test_bootstrap_bundle_budget_and_the_node_program_sizes() -> None:
    # Why the controller cannot carry the compute program (docs/bootstrap.md, "When the bundle outgrows userData").
    from ndfleet.nodefiles import nodeapp

    # (How close the prod bundle had come to the budget before the move is history, like customData's 51.3 KB.)
    whole = nodeapp._archive(nodeapp.source_files(), app=True)
    says("docs/bootstrap.md", f"the compute program alone is {kb(len(lzma.compress(nodeapp.build(), **XZ)))} KB "
                              f"xz-compressed (the whole node program, controller modules included, "
                              f"{kb(len(lzma.compress(whole, **XZ)))} KB")  # fmt: skip


XZ = {"format": lzma.FORMAT_XZ, "filters": nodebundle.XZ_FILTERS}


def test_bootstrap_fetch_budget() -> None:
    says("docs/bootstrap.md", f"the fetch budget ({nodebundle.fetch_budget_s()} s)")


def test_bootstrap_fetch_bounds() -> None:
    says("docs/bootstrap.md", f"{nodebundle.FETCH_ATTEMPTS} attempts of at most {nodebundle.FETCH_TIMEOUT_S} s each")
    says("docs/bootstrap.md", f"decompress it (at most {nodebundle.MAX_UNPACKED_BYTES >> 20} MiB)")


def test_bootstrap_profile_figures() -> None:
    p = PROFILES[H100]
    says("docs/bootstrap.md", f"`hardware.nvlinks_per_gpu` ({p.nvlinks_per_gpu})")
    says("docs/bootstrap.md", f"`hardware.ib_rate_gbps` ({p.ib_rate_gbps})")
    says("docs/bootstrap.md", f"`hardware.nvme_count` ({p.nvme_count})")
    says("docs/bootstrap.md", f"`hardware.vcpus` ({p.vcpus})")
    says("docs/bootstrap.md", f"`hca_pcie_width` ({p.hca_pcie_width})")
    says("docs/bootstrap.md", f"`timeouts.tool` ({p.thresholds.tool_timeout_s} s)")
    says("docs/bootstrap.md", f"`mount_retry_s` ({p.thresholds.mount_retry_s} s)")


# --- docs/monitoring.md -----------------------------------------------------------------------------------------
def test_monitoring_gpu_and_fabric_series() -> None:
    p = prepared("prod").spec.profile
    gpu = len(exporters.DCGM_COUNTERS)
    says("docs/monitoring.md", f"({gpu} x {p.gpus_per_vm} GPUs = {gpu * p.gpus_per_vm} series per node")
    per_hca = len(exporters.NODE_EXPORTER_COLLECTORS["infiniband"])
    hcas = len(p.ib_devices) + 1  # the profile's HCAs and the accelerated-networking one (ndfleet/monitoring/cost.py)
    says("docs/monitoring.md", f"InfiniBand counters ({per_hca} per HCA x {hcas} HCAs)")


def test_monitoring_default_node_exporter_cpu_series() -> None:
    says("docs/monitoring.md", f"(its `cpu` collector alone: {PROFILES[H100].vcpus} vCPUs x 8 modes)")


def test_the_capacity_floor_is_rounded_up_in_the_alert_wording() -> None:
    # The example in docs/monitoring.md: 0.9 of 64 nodes is 57.6, and the alert counts whole nodes.
    says("docs/monitoring.md", f"fewer than {island_capacity_floor(64, 0.9)} of 64 nodes healthy")


# --- the pinned image (issue 25) ----------------------------------------------------------------------------------
def test_the_pinned_image_the_docs_quote_is_the_examples() -> None:
    pinned = {prepared(s).spec.image.urn for s in EXAMPLE_STACKS if prepared(s).spec.image.pinned}
    assert len(pinned) == 1, f"the example stacks pin different images: {pinned}"
    (urn,) = pinned
    says("docs/sources.md", f"The `prod` and `h200` examples pin `{urn}`.")
    says("docs/plan-diff.md", f"examples pin a version, `{urn}`")
    # The example output of docs/preflight.md is for prod: its line is what the check prints for a published pin.
    spec = prepared("prod").spec
    check = check_image_version(spec, ImageVersions((spec.image.version,)))
    says("docs/preflight.md", f"{check.status.upper()} {check.id} {check.detail}")


# --- docs/slurm.md and docs/configuration.md: a line the tool writes, quoted in the text ------------------------
def test_slurm_slurmd_options_of_the_dev_stack() -> None:
    """The /etc/default/slurmd line docs/slurm.md shows is the one a compute node of dev's island ib00 receives, with
    `<version>` where the node has its island's boot version (ndfleet/boot_version.py: it changes with every change
    of the boot data, so the page does not quote one)."""
    from ndfleet.slurm.conf import slurm_site, slurmd_options

    island = prepared("dev").islands[0]
    line = slurmd_options(slurm_site(island_spec := prepared("dev").spec), island_spec.islands[0].name, "<version>")
    says("docs/slurm.md", f"SLURMD_OPTIONS={line}")
    assert f"boot-{island.boot_version} " in island.bootstrap.files["ndfleet-slurm-setup"]


def test_configuration_invalid_setting_message() -> None:
    """docs/configuration.md's example of a refused setting is what `ndfleet plan` prints for it."""
    from ndfleet.stackconfig.problems import SpecError

    with pytest.raises(SpecError) as refused:
        load_spec(base_config(vnetAddressSpace="172.16.0.0/16"), "figures")
    says("docs/configuration.md", " ".join(f"ndfleet plan: error: {refused.value.render()}".split()))


def test_guide_policy_rule_count() -> None:
    from ndfleet.plans.policy_rules import RULES

    says("docs/guide.md", f"`ndfleet policy` prints `policy: all {len(RULES)} rules pass`")

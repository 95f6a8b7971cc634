"""GPU checks: nvidia-smi, the kernel log, the fabric manager."""

from __future__ import annotations

from ndfleet_node.checks import Context, Result, check, failed, failed_list, passed
from ndfleet_node.parsers import ParseError
from ndfleet_node.parsers.logs import normalise_bus, parse_xids
from ndfleet_node.parsers.nvidia_smi import parse_nvlink_status, parse_q, parse_query_csv, row_remaps

# --query-gpu fields, read once per run (driver 535 or newer: clocks_event_reasons).
GPU_FIELDS = [
    "index",
    "pci.bus_id",
    "name",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.sram",
    "ecc.errors.uncorrected.aggregate.sram",
    "ecc.errors.uncorrected.volatile.dram",
    "ecc.errors.uncorrected.aggregate.dram",
    "ecc.errors.corrected.volatile.sram",
    "ecc.errors.corrected.aggregate.sram",
    "ecc.errors.corrected.volatile.dram",
    "ecc.errors.corrected.aggregate.dram",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
]
Gpus = list[dict[str, str]]


def gpu_table(ctx: Context) -> tuple[Gpus, str]:
    """(one dict per GPU, "") or ([], why not)."""

    def load() -> tuple[Gpus, str]:
        r = ctx.run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"])
        if not r.ok:
            return [], r.error
        try:
            return parse_query_csv(r.text, GPU_FIELDS), ""
        except ParseError as e:
            return [], str(e)

    return ctx.once("gpu_table", load)


def dev(g: dict[str, str]) -> str:
    return f"GPU {g['index']} ({g['pci.bus_id']})"


def num(value: str) -> int:
    return int(value) if value.strip().isdigit() else 0


# impact: fewer GPUs than the size has (NHC2009)
@check("gpu.count", "quick", "HpcMissingGpu", calls=(("tool", 1),))
def gpu_count(ctx: Context) -> Result:
    want, model = int(ctx.hw.gpu_count), str(ctx.hw.gpu_model)
    expected = f"{want} x {model}"
    gpus, err = gpu_table(ctx)
    if err:
        return failed("", expected, err)
    if len(gpus) != want:
        present = " ".join(g["pci.bus_id"] for g in gpus)
        return failed(f"{len(gpus)} GPUs", expected, f"found {len(gpus)} GPUs, expected {want}; present: {present}")
    wrong = [f"{dev(g)} is a {g['name']}" for g in gpus if g["name"] != model]
    if wrong:
        return failed(f"{len(gpus)} GPUs", expected, f"wrong GPU model: {'; '.join(wrong)}; expected {model}")
    return passed(f"{len(gpus)} x {model}", expected, f"all {len(gpus)} GPUs present")


# impact: uncorrectable / excess ECC errors: no dedicated category
@check("gpu.ecc", "quick", "HpcGenericFailure", calls=())
def gpu_ecc(ctx: Context) -> Result:
    t = ctx.th
    limits = {
        ("uncorrected", "sram"): int(t.ecc_sram_uncorrectable_max),
        ("uncorrected", "dram"): int(t.ecc_dram_uncorrectable_max),
        ("corrected", "sram"): int(t.ecc_sram_correctable_max),
        ("corrected", "dram"): int(t.ecc_dram_correctable_max),
    }
    expected = (
        f"ECC on; uncorrectable SRAM <= {limits['uncorrected', 'sram']}, DRAM <= {limits['uncorrected', 'dram']}; "
        f"correctable SRAM <= {limits['corrected', 'sram']}, DRAM <= {limits['corrected', 'dram']}"
    )
    gpus, err = gpu_table(ctx)
    if err:
        return failed("", expected, err)
    bad = []
    for g in gpus:
        if g["ecc.mode.current"] != "Enabled":
            bad.append(f"{dev(g)}: ECC mode is {g['ecc.mode.current']}, expected Enabled")
        for (kind, mem), limit in limits.items():
            v = num(g[f"ecc.errors.{kind}.volatile.{mem}"])
            a = num(g[f"ecc.errors.{kind}.aggregate.{mem}"])
            if v > limit or a > limit:
                label = "uncorrectable" if kind == "uncorrected" else "correctable"
                bad.append(f"{dev(g)}: {v} volatile / {a} aggregate {label} {mem.upper()} ECC errors, limit {limit}")
    if bad:
        return failed_list(bad, expected)
    return passed(
        "ECC on, counts within limits", expected, "ECC enabled and error counts within limits on every GPU"
    )


# impact: row remap pending or failed (NHC2007)
@check("gpu.row_remap", "quick", "HpcRowRemapFailure", calls=(("tool", 1),))
def gpu_row_remap(ctx: Context) -> Result:
    expected = "no pending or failed row remap"
    r = ctx.run(["nvidia-smi", "-q", "-d", "ROW_REMAPPER"])
    if not r.ok:
        return failed("", expected, r.error)
    remaps = row_remaps(parse_q(r.text))
    bad = []
    for i, rm in enumerate(remaps):
        if rm.pending:
            bad.append(f"GPU {i} ({rm.bus_id}): row remap pending (needs a GPU reset)")
        if rm.failed:
            bad.append(f"GPU {i} ({rm.bus_id}): row remapping failed")
    if bad:
        return failed_list(bad, expected)
    return passed("none pending or failed", expected, "no pending or failed row remaps")


def journal(ctx: Context, *args: str) -> tuple[str, str]:
    """(text, "") of `journalctl --no-pager ARGS`, or of dmesg where there is no journalctl; ("", why) on failure."""
    r = ctx.run(["journalctl", "--no-pager", *args])
    if r.rc == 127:
        r = ctx.run(["dmesg"])
    return (r.text, "") if r.ok else ("", r.error)


# impact: Xid in the kernel log; impact_categories.XID_CATEGORIES refines it for the Xids with a category of their own
# journalctl, or dmesg where there is none
@check("gpu.xid", "quick", "GpuXIDError", calls=(("tool", 2),))
def gpu_xid(ctx: Context) -> Result:
    codes = [int(c) for c in ctx.th.xid_fail_codes]
    expected = f"none of Xid {' '.join(map(str, codes))} since boot"
    gpus, _ = gpu_table(ctx)
    index = {normalise_bus(g["pci.bus_id"]): g["index"] for g in gpus}
    text, err = journal(ctx, "-k", "-b", "0")
    if err:
        return failed("", expected, f"cannot read the kernel log: {err}")
    bad = []
    for x in parse_xids(text):
        if x.code in codes:
            where = f" (GPU {index[x.bus_key]})" if x.bus_key in index else ""
            bad.append(f"Xid {x.code} on {x.pci}{where}: {x.text}")
    if bad:
        return Result("fail", bad[0].split(": ", 1)[0], expected, "; ".join(bad))
    return passed("none", expected, "no failing Xid in the kernel log since boot")


# impact: an NVLink down (NHC2016)
@check("gpu.nvlink", "quick", "NvLink", calls=(("tool", 1),))
def gpu_nvlink(ctx: Context) -> Result:
    want = int(ctx.hw.nvlinks_per_gpu)
    expected = f"{want} NVLinks up on each GPU"
    gpus, _ = gpu_table(ctx)
    bus = {g["index"]: g["pci.bus_id"] for g in gpus}
    r = ctx.run(["nvidia-smi", "nvlink", "-s"])
    if not r.ok:
        return failed("", expected, r.error)
    bad = []
    for g in parse_nvlink_status(r.text):
        if len(g.up) != want:
            down = " ".join(map(str, g.down)) or "all"
            where = bus.get(str(g.index), g.uuid)
            bad.append(f"GPU {g.index} ({where}): {len(g.up)} of {want} NVLinks up; down: {down}")
    if bad:
        return failed_list(bad, expected)
    return passed(f"{want} up on every GPU", expected, "all NVLinks up")


# impact: fabric manager not running: usually software; the node is replaced, not reported
@check("gpu.fabricmanager", "quick", None, calls=(("tool", 1),), setup_steps=("fabricmanager",))
def gpu_fabricmanager(ctx: Context) -> Result:
    expected = "nvidia-fabricmanager active"
    r = ctx.run(["systemctl", "is-active", "nvidia-fabricmanager"])
    if r.timed_out or r.rc == 127:
        return failed("", expected, r.error)
    state = (r.text.splitlines() or ["unknown"])[0].strip() or "unknown"
    if state == "active":
        return passed("active", expected, "nvidia-fabricmanager is active")
    return failed(
        state,
        expected,
        f"nvidia-fabricmanager is {state}, expected active "
        "(NVSwitch fabric not ready; see journalctl -u nvidia-fabricmanager)",
    )


# impact: GPU PCIe link downtrained: no dedicated category
@check("gpu.pcie", "quick", "HpcGenericFailure", calls=())
def gpu_pcie(ctx: Context) -> Result:
    gen, width = int(ctx.hw.gpu_pcie_gen), int(ctx.hw.gpu_pcie_width)
    expected = f"gen {gen} x{width}"
    gpus, err = gpu_table(ctx)
    if err:
        return failed("", expected, err)
    bad = [
        f"{dev(g)}: PCIe link x{g['pcie.link.width.current']} (x{g['pcie.link.width.max']} possible), "
        f"gen {g['pcie.link.gen.max']} max; expected gen {gen} x{width}"
        for g in gpus
        if num(g["pcie.link.width.current"]) < width or num(g["pcie.link.gen.max"]) < gen
    ]
    if bad:
        return failed_list(bad, expected)
    return passed(f"{expected} on every GPU", expected, "every GPU link at full width and generation")


THROTTLE = {
    "clocks_event_reasons.hw_thermal_slowdown": "HW thermal slowdown",
    "clocks_event_reasons.sw_thermal_slowdown": "SW thermal slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown": "HW power brake slowdown",
}


# impact: hardware slowdown at idle: no dedicated category
@check("gpu.throttle", "quick", "HpcGenericFailure", calls=())
def gpu_throttle(ctx: Context) -> Result:
    expected = "no thermal or power-brake clock events"
    gpus, err = gpu_table(ctx)
    if err:
        return failed("", expected, err)
    bad = [f"{dev(g)}: {label} active" for g in gpus for f, label in THROTTLE.items() if g[f] == "Active"]
    if bad:
        return failed_list(bad, expected)
    return passed("none", expected, "no GPU is thermal- or power-throttled")

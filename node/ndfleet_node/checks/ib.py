"""InfiniBand checks: GPUDirect RDMA module, ports (ibstat), link flapping, HCA PCIe links (lspci)."""

from __future__ import annotations

import os

from ndfleet_node.checks import Context, Result, check, failed, failed_list, passed
from ndfleet_node.checks.gpu import journal
from ndfleet_node.parsers import ParseError
from ndfleet_node.parsers.infiniband import IbPort, parse_ibstat
from ndfleet_node.parsers.logs import lost_carrier_counts
from ndfleet_node.parsers.lspci import parse_lnksta
from ndfleet_node.parsers.procfs import loaded_modules

# PCIe signalling rate per generation as lspci prints it (PCI-SIG; not a VM figure): hardware.hca_pcie_gen -> LnkSta.
PCIE_GT_PER_GEN = {3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}


# impact: nvidia-peermem not loaded: software
@check("ib.peermem", "quick", None, setup_steps=("peermem",))
def ib_peermem(ctx: Context) -> Result:
    expected = "nvidia_peermem loaded"
    path = ctx.host_path("/proc/modules")
    text = ctx.read("/proc/modules")
    if text is None:
        return failed("", expected, f"cannot read {path}")
    if "nvidia_peermem" in loaded_modules(text):
        return passed("loaded", expected, "nvidia_peermem is loaded (GPUDirect RDMA)")
    return failed(
        "not loaded", expected, f"nvidia_peermem is not in {path}: GPUDirect RDMA is off (modprobe nvidia-peermem)"
    )


def ib_table(ctx: Context) -> tuple[dict[tuple[str, int], IbPort], str]:
    def load() -> tuple[dict[tuple[str, int], IbPort], str]:
        r = ctx.run(["ibstat"])
        if not r.ok:
            return {}, r.error
        try:
            return parse_ibstat(r.text), ""
        except ParseError as e:
            return {}, str(e)

    return ctx.once("ibstat", load)


# impact: an IB port not Active (NHC2004); a missing device is MissingIB (NHC2002)
@check("ib.ports", "quick", "IBPortDown", calls=(("tool", 1),))
def ib_ports(ctx: Context) -> Result:
    devices, port, layer = list(ctx.hw.ib_devices), int(ctx.hw.ib_port), str(ctx.hw.ib_link_layer)
    expected = f"{len(devices)} ports ({port}) Active / LinkUp / {layer}"
    table, err = ib_table(ctx)
    if err:
        return failed("", expected, err)
    bad = []
    for d in devices:
        p = table.get((d, port))
        if p is None:
            bad.append(f"{d} port {port}: missing")
        elif (p.state, p.physical_state, p.link_layer) != ("Active", "LinkUp", layer):
            bad.append(
                f"{d} port {port}: {p.state} / {p.physical_state} / {p.link_layer}, "
                f"expected Active / LinkUp / {layer}"
            )
    if bad:
        return failed_list(bad, expected)
    return passed(f"{len(devices)} Active", expected, f"all {len(devices)} InfiniBand ports Active / LinkUp")


# impact: an IB port below its rate (NHC2003)
@check("ib.rate", "quick", "IBPerformance")
def ib_rate(ctx: Context) -> Result:
    devices, port, rate = list(ctx.hw.ib_devices), int(ctx.hw.ib_port), float(ctx.hw.ib_rate_gbps)
    shown = f"{rate:g}"
    expected = f"{shown} Gb/s on each active port"
    table, err = ib_table(ctx)
    if err:
        return failed("", expected, err)
    # Ports that are down are ib.ports' failure; their rate is not judged here.
    bad = [
        f"{d} port {port}: {'unknown' if p.rate_gbps is None else f'{p.rate_gbps:g}'} Gb/s, expected {shown}"
        for d in devices
        for p in [table.get((d, port))]
        if p is not None and p.state == "Active" and p.rate_gbps != rate
    ]
    if bad:
        return failed_list(bad, expected)
    return passed(f"{shown} Gb/s", expected, f"every active InfiniBand port at {shown} Gb/s")


# impact: IB link flapping (NHC2005)
# journalctl, or dmesg where there is none
@check("ib.flap", "quick", "IBPortFlapping", calls=(("tool", 2),))
def ib_flap(ctx: Context) -> Result:
    devices, port = list(ctx.hw.ib_devices), int(ctx.hw.ib_port)
    limit, hours = int(ctx.th.ib_link_down_max), int(ctx.th.ib_flap_window_hours)
    expected = f"<= {limit} link-down events per port (counters; lost carrier in {hours} h)"
    bad = []
    for d in devices:
        value = (ctx.read(f"/sys/class/infiniband/{d}/ports/{port}/counters/link_downed") or "").strip()
        if value.isdigit() and int(value) > limit:
            bad.append(f"{d} port {port}: link_downed counter {value}, limit {limit}")
    text, err = journal(ctx, "--since", f"-{hours}h")
    if err:
        return failed("", expected, f"cannot read the journal: {err}")
    for iface, n in sorted(lost_carrier_counts(text).items()):
        if n > limit:
            bad.append(f"{iface}: {n} lost-carrier events in {hours} h, limit {limit}")
    if bad:
        return failed_list(bad, expected)
    return passed("within limits", expected, "no InfiniBand link flapping")


# impact: HCA PCIe link downtrained: lowers IB bandwidth (NHC2003)
@check("ib.pcie", "quick", "IBPerformance", calls=(("tool", "ib_devices"),))
def ib_pcie(ctx: Context) -> Result:
    speed, width = PCIE_GT_PER_GEN.get(int(ctx.hw.hca_pcie_gen), "?"), int(ctx.hw.hca_pcie_width)
    expected = f"{speed} x{width}"
    bad = []
    for d in ctx.hw.ib_devices:
        link = ctx.host_path(f"/sys/class/infiniband/{d}/device")
        target = os.path.realpath(link)
        if not os.path.islink(link) or not os.path.exists(target):
            bad.append(f"{d}: no PCI device under {ctx.host_path(f'/sys/class/infiniband/{d}')}")
            continue
        bdf = os.path.basename(target)
        r = ctx.run(["lspci", "-vv", "-s", bdf])
        if not r.ok:
            bad.append(f"{d} ({bdf}): {r.error}")
            continue
        try:
            sta = parse_lnksta(r.text)[0]
            got = f"{sta.speed} {sta.width}"
        except ParseError:
            got = "unknown (no LnkSta)"
        if got != expected:
            bad.append(f"{d} ({bdf}): PCIe link {got}, expected {expected}")
    if bad:
        return failed_list(bad, expected)
    return passed(f"{expected} on every HCA", expected, "every HCA link at full width and speed")

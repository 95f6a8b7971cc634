"""Day-one events on the booted cluster: a compute node reboots, the controller restarts; nothing is lost."""

from __future__ import annotations

from tests.twin.conftest import BAD_CABLE_NODE
from tests.twin.test_boot import BOOT_TIMEOUT_S, healthy_nodes
from tests.twin.test_cluster import controller, login, nodes_by_name
from tests.twin.twin import Twin


def installs(tm, package: str) -> int:
    """How many times dpkg installed `package` on this machine (dpkg's own log survives reboots)."""
    log = tm.run("cat /var/log/dpkg.log", check=False).stdout
    return sum(1 for ln in log.splitlines() if f" install {package}:" in ln)


def test_a_rebooted_node_comes_back_validated_without_redoing_its_set_up(twin: Twin) -> None:
    tm = next(t for t in healthy_nodes(twin) if t.name != BAD_CABLE_NODE)
    # What the first boot did once: unpack the node bundle (ndfleet-unpack) and install Slurm (below). Mounts are
    # redone at every boot (they do not survive one), so they are not in this list.
    written_once = "stat -c %Y /opt/ndfleet/bin/ndfleet-node /var/lib/ndfleet/bundle.sha256"
    before = tm.run(written_once).stdout
    tm.reboot()
    tm.wait_for("validated after reboot", lambda: tm.unit_state("ndfleet-validated.target") == "active",
                BOOT_TIMEOUT_S, ("ndfleet-setup.service", "ndfleet-validate.service"))  # fmt: skip
    tm.wait_for("slurmd after reboot", lambda: tm.unit_state("slurmd.service") == "active", 300, ("slurmd.service",))
    assert tm.run(written_once).stdout == before  # unpacked and written once, not again
    assert installs(tm, "slurm-smd-slurmd") == 1  # the Slurm set-up did not reinstall


def test_a_rebooted_node_rejoins_its_island_in_service(twin: Twin) -> None:
    tm = next(t for t in healthy_nodes(twin) if t.name != BAD_CABLE_NODE)
    ctl = controller(twin)
    ctl.wait_for(
        f"{tm.name} back in service",
        lambda: "DRAIN" not in nodes_by_name(ctl).get(tm.name, {}).get("State", "DRAIN")
        and "IDLE" in nodes_by_name(ctl)[tm.name]["State"],
        600,
    )  # fmt: skip
    cp = login(twin).run(f"timeout 300 srun -p {tm.spec.island} -w {tm.name} -N 1 hostname", timeout=360)
    assert cp.stdout.strip() == tm.name


def test_a_restarted_controller_keeps_its_queue(twin: Twin) -> None:
    lg, ctl = login(twin), controller(twin)
    job = lg.run("sbatch --parsable --hold -p ib00 -N 2 --wrap 'sleep 1'").stdout.strip()
    ctl.run("systemctl restart slurmctld", timeout=180)
    assert ctl.unit_state("slurmctld.service") == "active"
    ctl.wait_for("squeue answers", lambda: lg.run("squeue -h", check=False).returncode == 0, 120)
    assert lg.run(f"squeue -h -j {job} -o %i").stdout.strip() == job
    lg.run(f"scancel {job}")

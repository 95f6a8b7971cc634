"""The Slurm configuration ndfleet renders from a spec, and what each Slurm machine boots with."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ndfleet.prepare import prepare
from ndfleet.slurm.conf import (
    config_files,
    dynamic_node_conf,
    island_partitions,
    slurm_addresses,
    slurm_site,
    slurmd_args,
)
from ndfleet.slurm.machines import machine_bootstrap, machine_user_data, slurm_node_files
from ndfleet.spec.config import ClusterSpec, SpecError, load_spec
from tests.conftest import base_config

REPO = Path(__file__).resolve().parents[2]


def spec_of(**overrides: object) -> ClusterSpec:
    return load_spec(base_config(scheduler="slurm", **overrides), "prod")


@pytest.fixture(scope="module")
def prod() -> ClusterSpec:
    return spec_of(nodes=256)


def conf_lines(spec: ClusterSpec) -> list[str]:
    return config_files(slurm_site(spec))["slurm.conf"].splitlines()


def test_one_nodeset_and_one_partition_per_island_selected_by_feature(prod: ClusterSpec) -> None:
    lines = conf_lines(prod)
    assert [ln for ln in lines if ln.startswith("NodeSet=")] == [
        "NodeSet=ns-ib00 Feature=island-ib00",
        "NodeSet=ns-ib01 Feature=island-ib01",
        "NodeSet=ns-ib02 Feature=island-ib02",
    ]
    parts = [ln.split()[:2] for ln in lines if ln.startswith("PartitionName=")]
    assert parts == [["PartitionName=ib00", "Nodes=ns-ib00"], ["PartitionName=ib01", "Nodes=ns-ib01"],
                     ["PartitionName=ib02", "Nodes=ns-ib02"]]
    # A job without -p goes to every island partition and runs in exactly one.
    assert "JobSubmitPlugins=all_partitions" in lines
    # No node names anywhere: nodes are dynamic and named after their (changing) host names.
    assert not [ln for ln in lines if ln.startswith("NodeName=")]


def test_dynamic_configless_nodes_with_room_for_repairs(prod: ClusterSpec) -> None:
    lines = conf_lines(prod)
    assert "SlurmctldParameters=enable_configless" in lines
    assert "MaxNodeCount=308" in lines  # 256 nodes + 20 % headroom (52) would be 308
    assert "SelectType=select/cons_tres" in lines  # dynamic nodes need cons_tres
    assert "GresTypes=gpu" in lines


def test_gres_and_cgroup_confine_gpus_and_memory(prod: ClusterSpec) -> None:
    files = config_files(slurm_site(prod))
    assert "Name=gpu File=/dev/nvidia[0-7]" in files["gres.conf"].splitlines()
    cgroup = files["cgroup.conf"].splitlines()
    assert {"ConstrainDevices=yes", "ConstrainRAMSpace=yes", "ConstrainCores=yes"} <= set(cgroup)
    assert "TaskPlugin=task/cgroup,task/affinity" in conf_lines(prod)
    assert "ProctrackType=proctrack/cgroup" in conf_lines(prod)


def test_a_compute_node_registers_with_its_island_gpus_and_memory(prod: ClusterSpec) -> None:
    site = slurm_site(prod)
    controller, _ = slurm_addresses(prod)
    assert dynamic_node_conf(site, "ib01") == "Feature=island-ib01 Gres=gpu:8 RealMemory=1843200"
    assert slurmd_args(site, "ib01")[:3] == ["-Z", "--conf-server", f"{controller}:6817"]
    with pytest.raises(ValueError, match="unknown island"):
        dynamic_node_conf(site, "ib09")


def test_static_addresses_at_the_top_of_the_compute_subnet() -> None:
    spec = spec_of(nodes=2, slurm={"loginCount": 2})
    assert spec.network.compute.cidr == "10.40.0.0/26"
    assert slurm_addresses(spec) == ("10.40.0.62", ["10.40.0.61", "10.40.0.60"])


def test_slurm_topology_output_matches_the_rendered_partitions(prod: ClusterSpec) -> None:
    lines = set(conf_lines(prod))
    for line in island_partitions(prod).splitlines():
        if line.startswith("NodeSet=") or line.startswith("JobSubmitPlugins="):
            assert line in lines
        elif line.startswith("PartitionName="):
            assert any(ln.startswith(line) for ln in lines)


def test_slurmd_starts_only_after_validation_on_a_compute_node(prod: ClusterSpec) -> None:
    files = {f.path: f.content for f in slurm_node_files(prod, prod.islands[0])}
    dropin = files["/etc/systemd/system/slurmd.service.d/ndfleet.conf"]
    assert "Requires=ndfleet-validated.target ndfleet-slurm-setup.service" in dropin
    assert "After=ndfleet-validated.target ndfleet-slurm-setup.service" in dropin
    assert "Wants=slurmd.service" in files["/etc/systemd/system/ndfleet-validated.target.d/slurmd.conf"]
    assert "ExecStart=/usr/sbin/slurmd -D -Z --conf-server ${SLURMD_CONF_SERVER} --conf ${SLURMD_CONF}" in dropin
    setup = files["/usr/local/sbin/ndfleet-slurm-setup"]
    assert "Feature=island-ib00 Gres=gpu:8 RealMemory=1843200" in setup and "SLURMD_CONF_SERVER=" in setup
    assert "HealthCheckProgram" not in setup
    assert files["/usr/local/sbin/ndfleet-slurm-health"].startswith("#!/bin/sh")


def test_compute_bootstrap_carries_the_slurm_files_only_with_slurm() -> None:
    with_slurm = spec_of(nodes=2)
    without = load_spec(base_config(nodes=2), "prod")
    dropin = "/etc/systemd/system/slurmd.service.d/ndfleet.conf"  # customData or the node bundle (userData)
    assert dropin in prepare(with_slurm).islands[0].bootstrap.node_files()
    assert not any("slurmd.service.d" in p for p in prepare(without).islands[0].bootstrap.node_files())


def test_machines_fetch_secrets_at_boot_and_carry_none(prod: ClusterSpec) -> None:
    for role in ("controller", "login"):
        boot = machine_bootstrap(prod, role)
        text = gzip.decompress(base64.b64decode(boot.custom_data)).decode()
        assert "vault.azure.net/secrets/" in text and "metadata/identity/oauth2/token" in text
        assert "StoragePass=" not in text  # the slurmdbd template travels in userData, with a placeholder
        doc = json.loads(base64.b64decode(machine_user_data(prod, role)))
        assert doc["version"] == prod.slurm.version if prod.slurm else False
        assert "/etc/slurm/slurm.conf" in doc["files"]
    controller_files = json.loads(base64.b64decode(machine_user_data(prod, "controller")))["files"]
    assert "StoragePass=@SLURMDBD_PASSWORD@" in controller_files["/etc/ndfleet/slurmdbd.conf.in"]


def test_scaling_changes_the_controllers_user_data_not_its_custom_data() -> None:
    small, large = spec_of(nodes=2), spec_of(nodes=150)
    assert machine_bootstrap(small, "controller").custom_data == machine_bootstrap(large, "controller").custom_data
    assert machine_user_data(small, "controller") != machine_user_data(large, "controller")


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init is installed by .ci/run")
def test_machine_cloud_config_passes_the_schema(prod: ClusterSpec, tmp_path: Path) -> None:
    for role in ("controller", "login"):
        path = tmp_path / f"{role}.yaml"
        path.write_text(machine_bootstrap(prod, role).user_data)
        proc = subprocess.run(["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True,
                              timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rendered_scripts_pass_shellcheck(prod: ClusterSpec, tmp_path: Path) -> None:
    scripts = {f"compute-{f.name}": f.content for f in slurm_node_files(prod, prod.islands[0])
               if f.content.startswith("#!/") and "python" not in f.content.splitlines()[0]}
    for role in ("controller", "login"):
        for name, content in machine_bootstrap(prod, role).files.items():
            if content.startswith("#!/") and "python" not in content.splitlines()[0]:
                scripts[f"{role}-{name}"] = content
    assert len(scripts) >= 6
    paths = []
    for name, content in scripts.items():
        path = tmp_path / name
        path.write_text(content)
        paths.append(str(path))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "shellcheck"), *paths], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"slurm": {"databaseSku": "Standard_F4s"}}, "ndfleet:slurm.databaseSku = 'Standard_F4s'"),
        ({"slurm": {"loginCount": 0}}, "ndfleet:slurm.loginCount = 0"),
        ({"slurm": {"version": "latest"}}, "ndfleet:slurm.version = 'latest'"),
        ({"slurm": {"controllerVmSizee": "x"}}, "ndfleet:slurm.controllerVmSizee is not a known setting"),
        ({"scheduler": "pbs"}, "ndfleet:scheduler = 'pbs'"),
        ({"scheduler": "none", "slurm": {"loginCount": 2}}, "ndfleet:slurm is set but ndfleet:scheduler = 'none'"),
    ],
)
def test_bad_slurm_settings_are_named(overrides: dict[str, object], message: str) -> None:
    config = base_config(scheduler="slurm")
    config.update(overrides)
    with pytest.raises(SpecError) as error:
        load_spec(config, "dev")
    assert message in str(error.value)


def test_docs_list_every_slurm_setting() -> None:
    from ndfleet.spec.config import SlurmConfig

    doc = (REPO / "docs" / "slurm.md").read_text()
    for name, field in SlurmConfig.model_fields.items():
        assert f"slurm.{field.alias or name}" in doc, f"docs/slurm.md does not describe slurm.{field.alias or name}"

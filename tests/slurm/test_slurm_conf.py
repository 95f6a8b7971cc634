"""The Slurm configuration ndfleet renders from a spec, and what each Slurm machine boots with."""

from __future__ import annotations

import base64
import gzip
import json
import shlex
import subprocess
from pathlib import Path

import pytest
from ndfleet_node.setup.apt import APT_LOCK

from ndfleet.boot_version import BOOT_VERSION_PLACEHOLDER
from ndfleet.prepare import prepare
from ndfleet.slurm.conf import (
    EPILOG_LOCK_WAIT_S,
    HEALTH_CHECK_LOCK,
    HEALTH_CHECK_VALIDATE_TIMEOUT_S,
    REQUEUE_RUN_LATE_S,
    REQUEUE_SLACK_S,
    config_files,
    dynamic_node_conf,
    epilog_validate_timeout_s,
    island_partitions,
    requeue_failed_within_s,
    slurm_addresses,
    slurm_site,
    slurmd_args,
)
from ndfleet.slurm.machines import (
    APT_PREFERENCES_PATH,
    BURNIN_CONFIG,
    DPKG_LOCK_TIMEOUT_S,
    ROLE_PACKAGES,
    SECRET_RETRY_S,
    SECRET_WAIT_S,
    SETUP_INSTALL_ALLOWANCE_S,
    SETUP_TIMEOUT_S,
    machine_bootstrap,
    machine_user_data,
    slurm_apt_preferences,
    slurm_node_files,
)
from ndfleet.slurm.machines import (
    bootstrap_extensions as slurm_bootstrap_extensions,
)
from ndfleet.slurm.userdata import decompose
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.problems import SpecError
from ndfleet.stackconfig.profiles import PROFILES, VmSizeProfile
from tests.conftest import base_config
from tests.slurm.controller_library import library_modules

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


def test_a_requeued_job_waits_the_stacks_hold_not_slurms_120_s(prod: ClusterSpec) -> None:
    # Slurm 25.11 (the default release): SchedulerParameters=requeue_delay holds a requeued job, and the job step
    # credential keeps Slurm's own lifetime (no AuthInfo cred_expire; slurm.conf(5)).
    lines = conf_lines(prod)
    assert "SchedulerParameters=requeue_delay=70" in lines
    assert not [ln for ln in lines if ln.startswith("AuthInfo=")]
    held = conf_lines(spec_of(nodes=16, slurm={"requeueHoldSeconds": 30, "version": "25.11.5-1"}))
    assert "SchedulerParameters=requeue_delay=30" in held


@pytest.mark.parametrize("version", ["24.11.5-1", "25.05.3", "22.05.8"])
def test_before_slurm_25_11_the_hold_is_cred_expire(version: str) -> None:
    # An older slurmctld has no requeue_delay (it ignores the option): its hold is the credential's lifetime.
    lines = conf_lines(spec_of(nodes=16, slurm={"requeueHoldSeconds": 30, "version": version}))
    assert "AuthInfo=cred_expire=30" in lines
    assert not [ln for ln in lines if ln.startswith("SchedulerParameters=")]


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
    # Its island and the boot version it runs (issue 42), as features: rendered for the bundle's placeholder, which
    # the boot step replaces with the version its customData names (test_bootstrap_unpack.py).
    assert dynamic_node_conf(site, "ib01", "0123456789ab") == (
        "Feature=island-ib01,boot-0123456789ab Gres=gpu:8 RealMemory=1843200 State=DRAIN "
        "Reason=ndfleet:burnin:awaiting"
    )
    assert f"Feature=island-ib01,boot-{BOOT_VERSION_PLACEHOLDER} " in dynamic_node_conf(site, "ib01")
    assert slurmd_args(site, "ib01")[:3] == ["-Z", "--conf-server", f"{controller}:6817"]
    with pytest.raises(ValueError, match="unknown island"):
        dynamic_node_conf(site, "ib09")


def test_static_addresses_at_the_top_of_the_compute_subnet() -> None:
    spec = spec_of(nodes=2, slurm={"loginCount": 2})
    assert spec.network.compute.cidr == "10.40.128.0/17"  # the VNet's upper half (ndfleet/stackconfig/addressing.py)
    assert slurm_addresses(spec) == ("10.40.255.254", ["10.40.255.253", "10.40.255.252"])


def test_slurm_topology_output_matches_the_rendered_partitions(prod: ClusterSpec) -> None:
    lines = set(conf_lines(prod))
    # One generator (ndfleet.slurm.conf.partition_lines) feeds both: every line the slurmTopology output carries is a
    # line of slurm.conf, to the letter (they once differed in OverSubscribe=EXCLUSIVE).
    topology = [ln for ln in island_partitions(prod).splitlines() if not ln.startswith("#")]
    assert topology and all(line in lines for line in topology)
    assert sum(ln.startswith("PartitionName=") for ln in topology) == len(prod.islands)
    assert all("OverSubscribe=EXCLUSIVE" in ln for ln in topology if ln.startswith("PartitionName="))


def _compute_files(spec: ClusterSpec) -> dict[str, str]:
    return {f.path: f.content for f in slurm_node_files(spec, spec.islands[0])}


def _ini(text: str) -> dict[str, list[str]]:
    """`Key=value` lines of a unit file: key -> values in order (comments and sections skipped)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_compute_nodes_enable_and_start_the_slurm_setup(prod: ClusterSpec) -> None:
    # Bug 1 (issue 16): nothing started the set-up on compute nodes, so Slurm was never installed.
    ext = slurm_bootstrap_extensions(prod, prod.islands[0])
    assert "ndfleet-slurm-setup.service" in ext.enable_units
    assert "ndfleet-slurm-setup.service" in ext.start_units
    activate = prepare(spec_of(nodes=2)).islands[0].bootstrap.activate
    assert ("systemctl", "enable", "ndfleet-slurm-setup.service") in activate
    assert ("systemctl", "start", "--no-block", "ndfleet-slurm-setup.service") in activate


def test_the_validated_target_wants_a_unit_that_exists_at_boot_not_slurmd(prod: ClusterSpec) -> None:
    # Bug 1: slurmd.service does not exist when the target's start job is queued at first boot, and a Wants= on a
    # unit that is not there is dropped. The target wants ndfleet-slurmd.service, which is in the bootstrap.
    files = _compute_files(prod)
    wants = _ini(files["/etc/systemd/system/ndfleet-validated.target.d/slurmd.conf"])["Wants"]
    assert wants == ["ndfleet-slurmd.service"]
    assert "/etc/systemd/system/ndfleet-slurmd.service" in files


def test_slurmd_is_started_after_validation_and_setup_by_a_unit_of_its_own(prod: ClusterSpec) -> None:
    unit = _ini(_compute_files(prod)["/etc/systemd/system/ndfleet-slurmd.service"])
    assert unit["Requires"] == ["ndfleet-validated.target ndfleet-slurm-setup.service"]
    assert unit["After"] == ["ndfleet-validated.target ndfleet-slurm-setup.service"]
    assert unit["Type"] == ["oneshot"]
    assert unit["ExecStart"] == ["/usr/bin/systemctl start --no-block slurmd.service"]


def test_the_setup_loads_the_installed_slurmd_unit(prod: ClusterSpec) -> None:
    setup = _compute_files(prod)["/usr/local/sbin/ndfleet-slurm-setup"]
    tail = setup[setup.index("SLURMD_OPTIONS="):]
    assert "systemctl daemon-reload" in tail


def test_slurmd_keeps_the_package_unit_and_only_gains_order(prod: ClusterSpec) -> None:
    # Bug 2: an ExecStart override with -D under the package's Type=notify never sent READY=1.
    dropin = _ini(_compute_files(prod)["/etc/systemd/system/slurmd.service.d/ndfleet.conf"])
    assert "ExecStart" not in dropin and "Type" not in dropin and "EnvironmentFile" not in dropin
    assert dropin["Requires"] == ["ndfleet-validated.target ndfleet-slurm-setup.service"]
    assert dropin["After"] == ["ndfleet-validated.target ndfleet-slurm-setup.service"]


def _systemd_split(value: str) -> list[str]:
    """What systemd makes of an unbraced $VAR standing as a word: split at whitespace, quotes removed
    (src/basic/env-util.c replace_env_argv, EXTRACT_UNQUOTE; double quotes, no escapes in our values)."""
    import shlex

    return shlex.split(value)


def _environment_file_value(line: str) -> str:
    """systemd's EnvironmentFile= parser for a value that does not start with a quote: kept verbatim, trailing
    whitespace removed (src/basic/env-file.c, state VALUE)."""
    key, _, value = line.partition("=")
    assert value and value[0] not in "\"'", "a leading quote would be parsed as a quoted value"
    return value.rstrip()


def test_slurmd_options_reach_slurmd_as_the_intended_arguments(prod: ClusterSpec) -> None:
    setup = _compute_files(prod)["/usr/local/sbin/ndfleet-slurm-setup"]
    # The set-up writes the line with printf '%s\n' and a single-quoted argument: take that argument.
    written = next(ln for ln in setup.splitlines() if ln.startswith("printf 'SLURMD_OPTIONS=%s\\n' "))
    import shlex

    quoted = shlex.split(written)[2]
    value = _environment_file_value("SLURMD_OPTIONS=" + quoted)
    assert _systemd_split(value) == slurmd_args(slurm_site(prod), prod.islands[0].name)
    assert _systemd_split(value)[-2:] == [
        "--conf", f"Feature=island-ib00,boot-{BOOT_VERSION_PLACEHOLDER} Gres=gpu:8 RealMemory=1843200 State=DRAIN "
        "Reason=ndfleet:burnin:awaiting",
    ]


def test_the_health_check_program_is_a_shell_wrapper(prod: ClusterSpec) -> None:
    files = _compute_files(prod)
    assert "HealthCheckProgram" not in files["/usr/local/sbin/ndfleet-slurm-setup"]
    assert files["/usr/local/sbin/ndfleet-slurm-health"].startswith("#!/bin/sh")


@pytest.mark.parametrize("role", ["controller", "login", "compute"])
def test_packages_come_signed_from_the_stable_channel(prod: ClusterSpec, role: str) -> None:
    # Bug 3: plain Ubuntu has no Microsoft key and the source had no signed-by=; `insiders` was the wrong channel.
    setup = (_compute_files(prod) if role == "compute" else machine_bootstrap(prod, role).files)
    text = setup["/usr/local/sbin/ndfleet-slurm-setup" if role == "compute" else "ndfleet-slurm-setup"]
    key = "https://packages.microsoft.com/keys/microsoft.asc"
    assert f"curl_ -o /usr/share/keyrings/microsoft-prod.asc.new {key}" in text
    assert 'repo="https://packages.microsoft.com/repos/slurm-ubuntu-${codename}"' in text
    assert "signed-by=/usr/share/keyrings/microsoft-prod.asc] ${repo}/ stable main" in text
    # `insiders` only where the preferences keep Slurm from it (tests/slurm/test_slurm_apt.py), and in comments.
    code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert "insiders" not in code.replace(shlex.quote(slurm_apt_preferences()), "")
    assert text.index("microsoft.asc") < text.index('update_lists "$slurm_list"')


@pytest.mark.parametrize("role", ["controller", "login", "compute"])
def test_the_setup_installs_the_resolved_version_under_the_apt_lock(prod: ClusterSpec, role: str) -> None:
    setup = (_compute_files(prod) if role == "compute" else machine_bootstrap(prod, role).files)
    text = setup["/usr/local/sbin/ndfleet-slurm-setup" if role == "compute" else "ndfleet-slurm-setup"]
    prefs = f"printf '%s' {shlex.quote(slurm_apt_preferences())} > {APT_PREFERENCES_PATH}"
    lock = f'flock -w {prod.profile.thresholds.setup_timeout_s} "$apt_lock_fd"'
    order = [prefs, f"exec {{apt_lock_fd}}>{APT_LOCK}", lock, 'update_lists "$slurm_list" || exit 1',
             'resolved=$(resolve_release "$repo" stable) || exit 1', "apt_ install", "apt-mark",
             "exec {apt_lock_fd}>&-"]  # fmt: skip
    at = [text.index(step) for step in order]
    assert at == sorted(at)
    install = next(ln for ln in text.splitlines() if ln.strip().startswith("apt_ install"))
    packages = ROLE_PACKAGES[role]
    assert [w for w in install.split() if "=" in w] == [f'{p}="${{resolved}}"' for p in packages]


def _run_installed_version(text: str, version: str, installed: dict[str, str], tmp_path: Path) -> str:
    """The set-up's installed_version with `version` pinned and a fake dpkg-query that knows `installed`."""
    functions = "".join(
        text[(start := text.index(f"\n{name}() {{\n") + 1) : text.index("\n}\n", start) + 3]
        for name in ("of_release", "installed_version")
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    cases = "".join(f"  {p}) echo -n '{v}' ;;\n" for p, v in installed.items())
    (bin_dir / "dpkg-query").write_text(f'#!/bin/sh\ncase "$3" in\n{cases}  *) exit 1 ;;\nesac\n')
    (bin_dir / "dpkg-query").chmod(0o755)
    proc = subprocess.run(["bash", "-c", f"set -euo pipefail\nversion={version}\n{functions}installed_version"],
                          capture_output=True, text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30,
                          check=True)  # fmt: skip
    return proc.stdout.strip()


@pytest.mark.parametrize(
    ("version", "installed", "answer"),
    [
        ("25.11.5", {"slurm-smd": "installed 25.11.5-2", "slurm-smd-client": "installed 25.11.5-2"}, "25.11.5-2"),
        ("25.11.5-2", {"slurm-smd": "installed 25.11.5-2", "slurm-smd-client": "installed 25.11.5-2"}, "25.11.5-2"),
        # Another release, another revision, mixed revisions, one package missing or only its configuration left:
        ("25.11.6", {"slurm-smd": "installed 25.11.5-2", "slurm-smd-client": "installed 25.11.5-2"}, ""),
        ("25.11.5-1", {"slurm-smd": "installed 25.11.5-2", "slurm-smd-client": "installed 25.11.5-2"}, ""),
        ("25.11.5", {"slurm-smd": "installed 25.11.5-2", "slurm-smd-client": "installed 25.11.5-1"}, ""),
        ("25.11.5", {"slurm-smd": "installed 25.11.50-1", "slurm-smd-client": "installed 25.11.50-1"}, ""),
        ("25.11.5", {"slurm-smd": "installed 25.11.5-2"}, ""),
        ("25.11.5", {"slurm-smd": "installed 25.11.5-2", "slurm-smd-client": "config-files 25.11.5-2"}, ""),
    ],
)
def test_already_installed_means_every_package_at_one_version_of_the_release(
    version: str, installed: dict[str, str], answer: str, tmp_path: Path
) -> None:
    spec = spec_of(nodes=2)
    text = machine_bootstrap(spec, "login").files["ndfleet-slurm-setup"]  # slurm-smd and slurm-smd-client
    assert _run_installed_version(text, version, installed, tmp_path) == answer


@pytest.mark.parametrize("role", ["controller", "login", "compute"])
def test_every_apt_call_waits_for_the_dpkg_lock(prod: ClusterSpec, role: str) -> None:
    setup = (_compute_files(prod) if role == "compute" else machine_bootstrap(prod, role).files)
    text = setup["/usr/local/sbin/ndfleet-slurm-setup" if role == "compute" else "ndfleet-slurm-setup"]
    lines = [ln.strip() for ln in text.splitlines() if not ln.strip().startswith(("#", "log ", "{ log "))]
    calls = [ln for ln in lines if "apt-get" in ln or "apt-mark" in ln or ln.startswith(("apt_ ", "if ! apt_ "))]
    assert calls
    for call in calls:
        assert call.startswith(("apt_ ", "if ! apt_ ")) or f"DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_S}" in call, call
    install = next(c for c in calls if c.startswith("apt_ install"))
    assert "--allow-change-held-packages" in install


def test_key_vault_403_and_404_are_retried_within_the_units_limit(prod: ClusterSpec) -> None:
    text = machine_bootstrap(prod, "controller").files["ndfleet-slurm-setup"]
    assert "403|404|429|5??|000" in text
    assert f"secrets_deadline=$((SECONDS + {SECRET_WAIT_S}))" in text and f"sleep {SECRET_RETRY_S}" in text
    # ndfleet's apt lock (the node set-up holds it at most for its unit's limit), apt waits twice at most for dpkg's
    # lock, then installs; then the secrets; all below the unit's limit, for every VM size.
    for profile in PROFILES.values():
        lock_wait = profile.thresholds.setup_timeout_s
        assert (lock_wait + 2 * DPKG_LOCK_TIMEOUT_S + SETUP_INSTALL_ALLOWANCE_S + SECRET_WAIT_S + SECRET_RETRY_S
                < SETUP_TIMEOUT_S), profile.name  # fmt: skip
    service = _ini(machine_bootstrap(prod, "controller").files["ndfleet-slurm-setup.service"])
    assert service["TimeoutStartSec"] == [str(SETUP_TIMEOUT_S)]


def test_the_default_slurm_version_is_a_release_without_package_revision() -> None:
    from ndfleet.stackconfig.settings import SlurmConfig

    assert SlurmConfig().version == "25.11.5"


@pytest.mark.parametrize("version", ["25.11.5", "25.11.5-1", "22.05.11", "24.11.7-12"])
def test_a_release_or_an_exact_package_version_is_accepted(version: str) -> None:
    assert spec_of(slurm={"version": version}).slurm.version == version  # type: ignore[union-attr]


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
        doc = decompose(machine_user_data(prod, role))[1]
        assert doc["version"] == prod.slurm.version if prod.slurm else False
        assert "/etc/slurm/slurm.conf" in doc["files"]
    controller_files = decompose(machine_user_data(prod, "controller"))[1]["files"]
    assert "StoragePass=@SLURMDBD_PASSWORD@" in controller_files["/etc/ndfleet/slurmdbd.conf.in"]


def test_scaling_changes_the_controllers_user_data_not_its_custom_data() -> None:
    small, large = spec_of(nodes=2), spec_of(nodes=150)
    assert machine_bootstrap(small, "controller").custom_data == machine_bootstrap(large, "controller").custom_data
    assert machine_user_data(small, "controller") != machine_user_data(large, "controller")


def test_a_gpu_size_change_changes_the_controllers_user_data_not_its_custom_data() -> None:
    h100, h200 = spec_of(vmSize="Standard_ND96isr_H100_v5"), spec_of(vmSize="Standard_ND96isr_H200_v5")
    assert machine_bootstrap(h100, "controller").custom_data == machine_bootstrap(h200, "controller").custom_data
    burnin = decompose(machine_user_data(h200, "controller"))[1]["files"][BURNIN_CONFIG]
    assert json.loads(burnin)["vm_size"] == "Standard_ND96isr_H200_v5"


@pytest.mark.needs_tool("cloud-init")
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
        ({"slurm": {"version": "21.08.8-1"}}, "of 22.05 or newer"),
        ({"slurm": {"version": "25.13.1-1"}}, "YY.MM.P-R"),
        ({"slurm": {"version": "25.13.1"}}, "a Slurm release YY.MM.P of 22.05 or newer"),
        ({"slurm": {"version": "25.11"}}, "a Slurm release YY.MM.P"),
        ({"slurm": {"version": "25.11.5-"}}, "YY.MM.P-R"),
        ({"slurm": {"version": "25.11.5-0"}}, "YY.MM.P-R"),
        ({"slurm": {"version": "25.11.5*"}}, "ndfleet:slurm.version = '25.11.5*'"),
        ({"slurm": {"version": "25.11.5-1\nx"}}, "YY.MM.P-R"),
        ({"slurm": {"controllerVmSizee": "x"}}, "ndfleet:slurm.controllerVmSizee is not a known setting"),
        ({"slurm": {"requeueHoldSeconds": 4}}, "ndfleet:slurm.requeueHoldSeconds = 4"),
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
    from ndfleet.stackconfig.settings import SlurmConfig

    doc = (REPO / "docs" / "slurm.md").read_text()
    for name, field in SlurmConfig.model_fields.items():
        assert f"slurm.{field.alias or name}" in doc, f"docs/slurm.md does not describe slurm.{field.alias or name}"


def test_the_health_check_finds_the_images_tools_under_slurmds_path(prod: ClusterSpec) -> None:
    # slurmd runs HealthCheckProgram with PATH=/bin:/usr/bin; ibstat is in /usr/sbin (found by the twin).
    script = _compute_files(prod)["/usr/local/sbin/ndfleet-slurm-health"]
    path = next(ln.split("=", 1)[1] for ln in script.splitlines() if ln.startswith("PATH="))
    assert {"/usr/sbin", "/opt/nccl-tests/build"} <= set(path.split(":"))
    assert "export PATH" in script


@pytest.fixture
def burn_in_run(elastic: ClusterSpec, tmp_path: Path) -> Path:
    """The controller's burn-in script run once with a fake scontrol (an elastic node powering up, a fixed node
    awaiting burn-in), python3 and systemctl that record their arguments in tmp_path."""
    script = tmp_path / "ndfleet-burnin"
    script.write_text(machine_bootstrap(elastic, "controller").files["ndfleet-burnin"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    awaiting = "Reason=ndfleet:burnin:awaiting [slurm@2026-12-03T18:21:07]"
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\n[ \"$1\" = -o ] || exit 0\n"
        f"echo 'NodeName=gpu-1 State=IDLE+CLOUD+DRAIN+NOT_RESPONDING+POWERING_UP Partitions=gpu {awaiting}'\n"
        f"echo 'NodeName=dev-ib00-000000 State=IDLE+DRAIN Partitions=ib00 {awaiting}'\n"
    )
    (bin_dir / "python3").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'runs'}\n")
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'systemctl'}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=True)
    return tmp_path


def test_the_burn_in_timer_skips_an_island_whose_awaiting_nodes_are_not_up_yet(burn_in_run: Path) -> None:
    # Found by the twin: an elastic island whose only node was still powering up failed ndfleet-burnin.service.
    runs = (burn_in_run / "runs").read_text().splitlines()
    assert [r.split("--partition ")[1].split()[0] for r in runs] == ["ib00"]


def test_a_burn_in_hands_over_at_once_to_the_elastic_reconcile(burn_in_run: Path) -> None:
    # Found by the twin: released at the timer's next run, a held job found its burned-in nodes being suspended.
    assert (burn_in_run / "systemctl").read_text().splitlines() == ["start --no-block ndfleet-elastic.service"]


def test_the_controller_burns_in_every_island_with_nodes_awaiting_it(prod: ClusterSpec, tmp_path: Path) -> None:
    # Bug 5: nothing ran the burn-in, so nodes drained awaiting it would stay drained for ever.
    boot = machine_bootstrap(prod, "controller")
    assert "ndfleet-burnin.timer" in boot.files and "ndfleet_node/burnin/slurm.py" in library_modules(prod, tmp_path)
    assert "systemctl enable --now ndfleet-burnin.timer" in boot.files["ndfleet-slurm-setup"]
    script = boot.files["ndfleet-burnin"]
    assert "python3 -m ndfleet_node.burnin.slurm" in script and "--partition" in script


@pytest.fixture(scope="module")
def elastic() -> ClusterSpec:
    return spec_of(
        nodes=None,
        islands=[
            {"name": "a", "nodes": 2},
            {"name": "gpu", "elastic": {"minNodes": 1, "maxNodes": 4, "idleMinutes": 2, "resumeTimeoutMinutes": 30}},
        ],
    )


def test_an_elastic_island_is_cloud_nodes_with_the_sizes_shape_feature_gpus_and_memory(elastic: ClusterSpec) -> None:
    # ND96isr H100 v5 (the spec's default size): 96 vCPUs = 2 sockets x 48 cores x 1 thread; RealMemory 1800 GiB, the
    # validator's floor, below CycleCloud's 1900 GiB - 5 % = 1805 GiB. Without the shape Slurm takes the node as 1 CPU.
    assert elastic.profile.name == "Standard_ND96isr_H100_v5"
    assert (
        "NodeName=gpu-[1-4] State=CLOUD CPUs=96 Sockets=2 CoresPerSocket=48 ThreadsPerCore=1 Feature=island-gpu "
        "Gres=gpu:8 RealMemory=1843200"
    ) in conf_lines(elastic)


@pytest.mark.parametrize(
    ("size", "cyclecloud_mib", "floor_mib"),
    # CycleCloud: memory - max(1 GiB, 5 %) (azure-slurm/slurmcc/partition.py); floor: the profile's memory_min_gib.
    [("Standard_ND96isr_H100_v5", 1900 * 1024 - 97280, 1800 * 1024),
     ("Standard_ND96isr_H200_v5", 1850 * 1024 - 94720, 1750 * 1024)],
)  # fmt: skip
def test_real_memory_keeps_back_at_least_what_cyclecloud_does_and_never_exceeds_the_validators_floor(
    size: str, cyclecloud_mib: int, floor_mib: int
) -> None:
    profile = PROFILES[size]
    assert profile.slurm_real_memory_mib == min(cyclecloud_mib, floor_mib)
    assert profile.slurm_real_memory_mib <= cyclecloud_mib and profile.slurm_real_memory_mib <= floor_mib


def test_a_profile_whose_shape_is_not_its_vcpus_is_refused() -> None:
    with pytest.raises(ValueError, match="sockets x cores_per_socket x threads_per_core = 48, not the size's 96"):
        VmSizeProfile.model_validate({**PROFILES["Standard_ND96isr_H100_v5"].model_dump(), "sockets": 1})


def test_dynamic_nodes_leave_the_shape_to_the_hardware(prod: ClusterSpec) -> None:
    # slurmd(8), --conf: CPUs, Boards, SocketsPerBoard, CoresPerSocket, ThreadsPerCore given there override what
    # `slurmd -C` reads; ndfleet gives none, so a VM registers the shape it has.
    conf = dynamic_node_conf(slurm_site(prod), "ib00")
    assert not any(key in conf for key in ("CPUs=", "Sockets=", "CoresPerSocket=", "ThreadsPerCore="))


def test_only_the_elastic_partition_suspends_its_nodes(elastic: ClusterSpec) -> None:
    lines = conf_lines(elastic)
    assert [line for line in lines if "SuspendTime=" in line] == [
        "PartitionName=gpu Nodes=ns-gpu MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE SuspendTime=120 "
        "ResumeTimeout=1800"
    ]


def test_power_saving_runs_ndfleets_programs_and_keeps_min_nodes_up(elastic: ClusterSpec) -> None:
    lines = conf_lines(elastic)
    for line in (
        "ResumeProgram=/usr/local/sbin/ndfleet-elastic-resume",
        "SuspendProgram=/usr/local/sbin/ndfleet-elastic-suspend",
        "ResumeFailProgram=/usr/local/sbin/ndfleet-elastic-resume-fail",
        "SuspendExcNodes=gpu-[1-4]:1",
        "SlurmctldParameters=enable_configless,idle_on_node_suspend",
    ):
        assert line in lines


@pytest.mark.parametrize("which", ["prod", "elastic"])
def test_no_setting_that_slurm_25_11_has_made_its_default_or_removed(
    which: str, prod: ClusterSpec, elastic: ClusterSpec
) -> None:
    # cloud_reg_addrs: removed in 23.11 (slurmctld logs it as defunct), its behaviour is the default; PrivateData=cloud:
    # cloud nodes are listed by default since 23.02; TreeWidth: 16 by default since 23.11, and fan-out reaches dynamic
    # and CLOUD nodes (RELEASE_NOTES 23.02 and 23.11, docs/slurm.md). 65533 would send every message from slurmctld.
    text = config_files(slurm_site(prod if which == "prod" else elastic))["slurm.conf"]
    setting_lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    for gone in ("cloud_reg_addrs", "PrivateData", "TreeWidth"):
        assert not [ln for ln in setting_lines if gone in ln], gone


def test_every_daemon_reaches_the_controller_by_its_address(prod: ClusterSpec) -> None:
    # A network with its own DNS servers (bring your own network) may not resolve the controller's host name.
    controller, _ = slurm_addresses(prod)
    lines = conf_lines(prod)
    assert f"SlurmctldHost={prod.name_prefix}-slurmctld({controller})" in lines
    assert f"AccountingStorageHost={controller}" in lines
    assert slurm_site(prod).conf_server == f"{controller}:6817"


def test_the_controller_address_of_a_site_is_the_one_everything_uses(prod: ClusterSpec) -> None:
    lines = config_files(slurm_site(prod, controller_addr="10.1.2.3"))["slurm.conf"].splitlines()
    assert "SlurmctldHost=prod-slurmctld(10.1.2.3)" in lines
    assert "AccountingStorageHost=10.1.2.3" in lines


def test_a_stack_without_elastic_islands_has_no_power_saving(prod: ClusterSpec) -> None:
    assert not [line for line in conf_lines(prod) if line.startswith(("ResumeProgram", "SuspendExcNodes", "NodeName"))]


def test_an_elastic_node_learns_its_slurm_name_before_slurmd_starts(elastic: ClusterSpec) -> None:
    files = {f.name: f.content for f in slurm_node_files(elastic, elastic.islands[1])}
    assert "ExecStartPre=/usr/local/sbin/ndfleet-slurm-name" in files["ndfleet-slurmd.service"]
    assert "> /etc/default/slurmd" not in files["ndfleet-slurm-setup"]
    assert "-N $name --conf-server" in files["ndfleet-slurm-name"]


def test_the_controller_gets_the_elastic_settings_in_its_user_data(elastic: ClusterSpec) -> None:
    import json

    files = decompose(machine_user_data(elastic, "controller"))[1]["files"]
    doc = json.loads(files["/etc/ndfleet/elastic.json"])
    assert doc["islands"] == {"gpu": {"scaleSet": f"{elastic.name_prefix}-gpu-vmss", "minNodes": 1, "maxNodes": 4}}


@pytest.mark.parametrize("version", ["25.11.2", "25.11.5"])
def test_no_topology_block_for_slurm_25_11_to_drop_powered_down_nodes_from(version: str) -> None:
    # Slurm 25.11.0-25.11.2 remove a CLOUD node listed in topology.conf/topology.yaml from its topology when it is
    # powered down and do not put it back (fixed in 25.11.3: SchedMD/slurm 0178580c04, ticket 24405; the workaround
    # was `Topology=default:<block>` on the node line). ndfleet keeps jobs inside an island by partitions selected
    # by feature and renders no topology plugin, topology file or Topology= option, for any release: docs/elastic.md.
    islands = [{"name": "a", "nodes": 2}, {"name": "gpu", "elastic": {"maxNodes": 4}}]
    spec = spec_of(nodes=None, islands=islands, slurm={"version": version})
    assert spec.slurm is not None and spec.slurm.version == version
    files = config_files(slurm_site(spec))
    assert set(files) == {"slurm.conf", "gres.conf", "cgroup.conf"}
    topology = [line for line in files["slurm.conf"].splitlines() if "topolog" in line.lower()]
    assert topology == [], topology


def test_suspend_timeout_leaves_the_suspend_program_time_to_retry_a_refused_delete(elastic: ClusterSpec) -> None:
    """SuspendTimeout bounds the suspend program (docs/elastic.md): within it, a delete Azure throttles is asked again
    after Retry-After (honoured up to MAX_RETRY_AFTER_S) at least three times, with a minute to spare."""
    from ndfleet_node.net import MAX_RETRY_AFTER_S

    from ndfleet.slurm.elastic import elastic_config

    timeout_s = int(next(line for line in conf_lines(elastic) if line.startswith("SuspendTimeout=")).split("=")[1])
    budget_s = json.loads(elastic_config(elastic))["delete_budget_s"]
    assert 3 * MAX_RETRY_AFTER_S <= budget_s <= timeout_s - 60


def _health_script(prod: ClusterSpec, tmp_path: Path, exit_code: int) -> tuple[Path, Path, Path]:
    """The rendered health-check script, its node program replaced by one that notes its run and exits
    `exit_code`, and its lock moved under tmp_path: (script, the note, the lock)."""
    note, lock = tmp_path / "ran", tmp_path / "health.lock"
    program = tmp_path / "ndfleet-node"
    program.write_text(f"#!/bin/sh\necho \"$1\" >> '{note}'\nexit {exit_code}\n")
    program.chmod(0o755)
    text = _compute_files(prod)["/usr/local/sbin/ndfleet-slurm-health"]
    assert "/opt/ndfleet/bin/ndfleet-node slurm-health" in text and HEALTH_CHECK_LOCK in text
    script = tmp_path / "ndfleet-slurm-health"
    script.write_text(text.replace("/opt/ndfleet/bin/ndfleet-node", str(program))
                      .replace(HEALTH_CHECK_LOCK, str(lock)))  # fmt: skip
    script.chmod(0o755)
    return script, note, lock


def test_as_the_epilog_and_as_the_health_check_the_exit_status_tells_the_truth(
    prod: ClusterSpec, tmp_path: Path
) -> None:
    # slurm.conf(5) Epilog: an Epilog that exits non-zero has slurmctld drain the node ("Epilog error"): the drain
    # the Epilog sets, since it calls no Slurm command (SchedMD, "Prolog and Epilog Guide").
    script, note, _ = _health_script(prod, tmp_path, 1)
    health = subprocess.run([str(script)], env={"PATH": "/usr/bin:/bin"}, timeout=60, check=False)
    epilog = subprocess.run([str(script)], env={"PATH": "/usr/bin:/bin", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"},
                            timeout=60, check=False)  # fmt: skip
    assert (health.returncode, epilog.returncode) == (1, 1)
    assert note.read_text() == "slurm-health\nslurm-health\n"
    conf = config_files(slurm_site(prod))["slurm.conf"].splitlines()
    assert "Epilog=/usr/local/sbin/ndfleet-slurm-health" in conf
    # The controller's requeue needs the failed job's record: MinJobAge past its window and two of its runs.
    assert f"MinJobAge={requeue_failed_within_s(prod) + REQUEUE_RUN_LATE_S}" in conf


def test_a_second_health_check_leaves_it_to_the_one_running(prod: ClusterSpec, tmp_path: Path) -> None:
    script, note, lock = _health_script(prod, tmp_path, 1)
    with subprocess.Popen(["flock", str(lock), "sleep", "30"]) as holder:
        try:
            for _ in range(100):  # until the holder has the lock
                if subprocess.run(["flock", "-n", str(lock), "true"], check=False).returncode != 0:
                    break
                subprocess.run(["sleep", "0.1"], check=False)
            second = subprocess.run([str(script)], env={"PATH": "/usr/bin:/bin"}, timeout=60, check=False)
        finally:
            holder.kill()
    assert second.returncode == 0 and not note.exists()


def test_the_epilog_is_the_programs_epilog_which_takes_the_lock_itself(prod: ClusterSpec, tmp_path: Path) -> None:
    """The Epilog is the program's --epilog (no Slurm command, no impact launch), not under flock(1): the program
    skips a burn-in job's end before it would wait for the lock (tests/slurm/test_slurm_health_requeue.py)."""
    periodic, epilog = _levels_run(prod, tmp_path)
    lock = str(tmp_path / "health.lock")
    assert epilog.startswith("slurm-health --epilog ") and "--impact-launch" not in epilog
    assert f"--lock {lock} --lock-wait {EPILOG_LOCK_WAIT_S} " in epilog
    assert "--epilog" not in periodic and "--impact-launch" in periodic


def _levels_run(spec: ClusterSpec, tmp_path: Path) -> tuple[str, str]:
    """The arguments the rendered health check gives the node program as the periodic check and as the Epilog."""
    script, _, _ = _health_script(spec, tmp_path, 0)
    args = tmp_path / "args"
    (tmp_path / "ndfleet-node").write_text(f"#!/bin/sh\necho \"$*\" >> '{args}'\n")
    subprocess.run([str(script)], env={"PATH": "/usr/bin:/bin"}, timeout=60, check=True)
    subprocess.run([str(script)], env={"PATH": "/usr/bin:/bin", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"},
                   timeout=60, check=True)  # fmt: skip
    periodic, epilog = args.read_text().splitlines()
    return periodic, epilog


def test_the_epilog_also_measures_the_node_and_the_periodic_check_does_not(prod: ClusterSpec, tmp_path: Path) -> None:
    """At a job's end the node is free: the Epilog validates at level `epilog` (quick and the 8-GPU all-reduce, which
    catches a GPU slow with no clock-event reason), bounded by the quick checks' and the all-reduce's timeouts; the
    periodic check, which runs under jobs, stays quick within slurmd's 60 s."""
    periodic, epilog = _levels_run(prod, tmp_path)
    assert f"--level quick --validate-timeout {HEALTH_CHECK_VALIDATE_TIMEOUT_S} " in periodic
    assert epilog.endswith(f"--level epilog --validate-timeout {epilog_validate_timeout_s(prod)}")
    # ND H100 v5's all-reduce bound, twice: a figure below the floor is measured again before the node fails.
    assert epilog_validate_timeout_s(prod) == HEALTH_CHECK_VALIDATE_TIMEOUT_S + 2 * 180


def test_with_the_epilog_performance_check_off_the_epilog_runs_the_quick_checks(tmp_path: Path) -> None:
    spec = spec_of(nodes=16, slurm={"epilogPerformanceCheck": False})
    periodic, epilog = _levels_run(spec, tmp_path)
    assert f"--level quick --validate-timeout {HEALTH_CHECK_VALIDATE_TIMEOUT_S} " in periodic
    assert epilog.endswith(f"--level quick --validate-timeout {HEALTH_CHECK_VALIDATE_TIMEOUT_S}")


def test_the_requeue_window_covers_the_epilogs_measurement_and_the_pass_that_names_its_check() -> None:
    """A failed job's Epilog exits non-zero up to the lock wait and its validation bound after the job ended, and
    the node is drained "Epilog error", which the controller's requeue does not read; the next periodic pass, within
    HealthCheckInterval, names the check within its bound and calls. The controller's requeue window (and MinJobAge
    past it) covers all of it, whatever HealthCheckInterval is."""
    for interval in (60, 300, 3600):
        spec = spec_of(nodes=16, slurm={"healthCheckIntervalSeconds": interval})
        periodic = interval + REQUEUE_SLACK_S
        epilog_path = EPILOG_LOCK_WAIT_S + epilog_validate_timeout_s(spec) + periodic
        assert requeue_failed_within_s(spec) == epilog_path
        assert f"MinJobAge={epilog_path + REQUEUE_RUN_LATE_S}" in conf_lines(spec)
    default, short = spec_of(nodes=16), spec_of(nodes=16, slurm={"healthCheckIntervalSeconds": 60})
    doc = " ".join((Path(__file__).parents[2] / "docs" / "slurm.md").read_text().split())
    assert (f"{requeue_failed_within_s(default)} s at the defaults, {requeue_failed_within_s(short)} s at the "
            "shortest interval (60 s)") in doc  # fmt: skip
    assert f"({epilog_validate_timeout_s(default)} s at level `epilog` on ND H100 v5)" in doc
    off = spec_of(nodes=16, slurm={"healthCheckIntervalSeconds": 60, "epilogPerformanceCheck": False})
    quick_epilog = EPILOG_LOCK_WAIT_S + HEALTH_CHECK_VALIDATE_TIMEOUT_S + 60 + REQUEUE_SLACK_S
    assert requeue_failed_within_s(off) == quick_epilog


def test_the_epilog_performance_check_is_a_boolean() -> None:
    with pytest.raises(SpecError) as e:
        spec_of(nodes=16, slurm={"epilogPerformanceCheck": "yes"})
    assert "epilogPerformanceCheck" in str(e.value) and "'yes'" in str(e.value)

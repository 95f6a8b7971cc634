"""What each Slurm machine boots with: the files of the controller, the login node(s) and the compute nodes.

Controller and login VMs get their own cloud-config (customData); compute nodes get extra files in their island's
bootstrap (`slurm_node_files`, called by ndfleet/nodefiles/bootstrap.py). Nothing here holds a secret: the munge key
and the database password are fetched from Key Vault at boot (ndfleet-slurm-setup), and the values Azure computes at
deployment (vault name, NFS account, database host) come from the machine's tags.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from ndfleet_node.names import (
    AWAITING_BURNIN_REASON,
    TAG_DB_HOST,
    TAG_IDENTITY_CLIENT_ID,
    TAG_NFS_ACCOUNT,
    TAG_VAULT,
)
from ndfleet_node.setup.apt import APT_LOCK

from ndfleet.boot_contract import STATE_DISK_LUN
from ndfleet.monitoring.agent import controller_config, controller_files
from ndfleet.nodefiles import nodebundle
from ndfleet.nodefiles.bootstrap import (
    BUNDLE_UNIT,
    CONFIG_DIR,
    CUSTOM_DATA_MAX_BYTES,
    IMDS_TAGS_URL,
    NODE_APP_PATH,
    NODE_PATH,
    REPORT_PATH,
    USER_DATA_MAX_BYTES,
    VALIDATE_NODE_PATH,
    BootstrapExtensions,
    BootstrapTooLarge,
    RenderedBootstrap,
    boot_step,
    impact_launch,
)
from ndfleet.nodefiles.machinefile import MachineFile, unique_names
from ndfleet.nodefiles.nodeapp import library
from ndfleet.nodefiles.nodebundle import IMDS_VAULT_TOKEN_URL, KEYVAULT_API_VERSION, VAULT_RETRY_S, VAULT_WAIT_S
from ndfleet.nodefiles.nodeconfig import node_config, to_json
from ndfleet.slurm.conf import (
    BURNIN_EVERY_S,
    BURNIN_IDLE_PARTNERS,
    BURNIN_LEVEL,
    BURNIN_SETTLE_S,
    CONTROLLER_STATE_MOUNT,
    EPILOG_LOCK_WAIT_S,
    HEALTH_CHECK_LOCK,
    HEALTH_CHECK_PROGRAM,
    HEALTH_CHECK_VALIDATE_TIMEOUT_S,
    HOST_LEDGER,
    RESUME_FAIL_PROGRAM,
    RESUME_PROGRAM,
    SLURMDBD_PORT,
    SPARES_EVERY_S,
    SUSPEND_PROGRAM,
    SlurmSite,
    config_files,
    epilog_level,
    epilog_validate_timeout_s,
    render,
    slurm_site,
    slurmd_options,
    spares_config,
)
from ndfleet.slurm.elastic import ELASTIC_CONFIG, ELASTIC_STATE_DIR, RECONCILE_EVERY_S, elastic_config
from ndfleet.slurm.roll import ROLL_CONFIG, ROLL_EVERY_S, ROLL_PROGRAM, roll_config
from ndfleet.slurm.userdata import compose
from ndfleet.stackconfig.clusterspec import ClusterSpec, IslandSpec

# The named package source: Microsoft's Slurm builds (slurm-smd*) for Ubuntu, e.g. .../slurm-ubuntu-jammy/
# (the packages Azure CycleCloud Workspace for Slurm installs, Azure/cyclecloud-slurm azure-slurm-install/ubuntu.sh).
# The codename is appended on the machine. Channel `stable` (CycleCloud's default; `insiders` holds pre-releases).
SLURM_REPO_HOST = "packages.microsoft.com"
SLURM_REPO_URL = f"https://{SLURM_REPO_HOST}/repos/slurm-ubuntu"
SLURM_CHANNEL = "stable"
# The same repository's pre-release channel, which the Azure HPC image lists for its pmix (Azure/azhpc-images
# components/install_pmix.sh): no Slurm package may come from it (slurm_apt_preferences).
SLURM_OTHER_CHANNEL = "insiders"
# apt reads preferences.d in file name order and takes the first specific record that matches a version
# (apt_preferences(5)): this name sorts before the HPC image's own `slurm-repository-pin-990`
# (Azure/azhpc-images components/slurm-repo/slurm-u.pin, which pins slurm-smd* from packages.microsoft.com to 990).
APT_PREFERENCES_PATH = "/etc/apt/preferences.d/ndfleet-slurm"
# Microsoft's package signing key, ASCII-armored. Canonical's plain Ubuntu images do not have it; a .asc keyring
# works in signed-by= from apt 1.4 on (sources.list(5)).
MICROSOFT_KEY_URL = f"https://{SLURM_REPO_HOST}/keys/microsoft.asc"
MICROSOFT_KEYRING = "/usr/share/keyrings/microsoft-prod.asc"
# cloud-init and unattended-upgrades hold the dpkg lock during first boot; apt waits this long for it.
DPKG_LOCK_TIMEOUT_S = 300
# Azure role assignments take minutes to reach Key Vault: 403/404 are retried this long (all secrets together), as
# the boot step waits for the bundle's parts (one home: ndfleet/nodefiles/nodebundle.py).
SECRET_WAIT_S = VAULT_WAIT_S
SECRET_RETRY_S = VAULT_RETRY_S
SLURM_UID = 11100
ROLE_PACKAGES = {
    "controller": ("slurm-smd", "slurm-smd-client", "slurm-smd-slurmctld", "slurm-smd-slurmdbd"),
    "login": ("slurm-smd", "slurm-smd-client"),
    "compute": ("slurm-smd", "slurm-smd-client", "slurm-smd-slurmd"),
}
# Values Azure computes at deployment, read by the machines from their tags (instance metadata).
IMDS_TOKEN_URL = IMDS_VAULT_TOKEN_URL
IMDS_USER_DATA_URL = "http://169.254.169.254/metadata/instance/compute/userData?api-version=2021-01-01&format=text"
MUNGE_SECRET = "munge-key"
DB_SECRET = "slurmdbd-password"
DATABASE_USER = "slurmdbd"
DATABASE_NAME = "slurm_acct_db"
NFS_MOUNTS = ({"share": "home", "path": "/shared/home"}, {"share": "shared", "path": "/shared/apps"})
# Azure Files NFS 4.1 mount options (Microsoft Learn, storage-files-how-to-mount-nfs-shares); nofail: a node boots
# (and reports its health) even if the share is unreachable.
NFS_OPTIONS = "vers=4,minorversion=1,sec=sys,nconnect=4,_netdev,nofail"
# Worst case: the node set-up holding ndfleet's apt lock (at most its unit's limit, the profile's setup_timeout_s),
# two apt calls waiting for the dpkg lock, the downloads, the Key Vault wait, the state disk; the unit's limit stays
# above the sum of the bounds the script itself keeps (a test checks it for every profile).
SETUP_TIMEOUT_S = 2400
SETUP_INSTALL_ALLOWANCE_S = 300
SETUP_UNIT = "ndfleet-slurm-setup.service"
# slurm-reap on the controller: each scontrol call, and the whole run (the timer starts it every 5 minutes).
REAP_CALL_TIMEOUT_S = 30
REAP_TIMEOUT_S = 600
HTTP_TIMEOUT_S = 20


# The controller has no node program: the node-program modules it runs (`python3 -m ndfleet_node.slurm_reap`, the
# burn-in, the elastic programs, the Slurm exporter) reach it as one archive built like the nodes' zipapp
# (ndfleet/nodefiles/nodeapp.py `library`), on their PYTHONPATH. Which modules: every `python3 -m ndfleet_node.X`
# the controller's own files run, and what those import (`controller_library`), so no list is kept by hand. Shipped
# to every controller, so that making an island elastic changes only userData (slurm.conf, elastic.json).
# The archive (150 KB, 41 KB gzipped: four fifths of what the controller's customData held) travels as the
# controller's bundle at the head of its userData, not in customData (`controller_bundle`, docs/slurm.md).
LIB_DIR = "/usr/local/lib/ndfleet"
NODE_LIBRARY = f"{LIB_DIR}/ndfleet-node.zip"
_RUNS_MODULE = re.compile(r"python3 -m (ndfleet_node(?:\.\w+)+)")
RECONCILE_PROGRAM = "/usr/local/sbin/ndfleet-elastic-reconcile"
# (program file, the program's argument, the slurm.conf setting that runs it)
ELASTIC_PROGRAMS = (
    (RESUME_PROGRAM, "resume", "ResumeProgram"),
    (SUSPEND_PROGRAM, "suspend", "SuspendProgram"),
    (RESUME_FAIL_PROGRAM, "resume-fail", "ResumeFailProgram"),
    (RECONCILE_PROGRAM, "reconcile", "reconcile timer"),
)
ELASTIC_NAME_PROGRAM = "/usr/local/sbin/ndfleet-slurm-name"
BURNIN_CONFIG = f"{CONFIG_DIR}/burnin-node.json"
SPARES_CONFIG = f"{CONFIG_DIR}/spares.json"
# A backstop only: every test inside has its own timeout derived from the profile (docs/burnin.md).
BURNIN_TIMEOUT_S = 3600


def controller_library(files: list[MachineFile]) -> MachineFile:
    """The node-program modules `files` run with `python3 -m`, and what they import, as one archive."""
    entries = sorted({m for f in files for m in _RUNS_MODULE.findall(f.content)})
    return MachineFile(NODE_LIBRARY, 0o644, library(tuple(entries)))


def slurm_apt_preferences() -> str:
    """/etc/apt/preferences.d/ndfleet-slurm: Slurm packages only from ndfleet's channel of Microsoft's repository.

    apt gives each *version* of a package one priority, from the first specific record that matches any of the places
    the version is offered (apt_preferences(5); a version the `stable` and the `insiders` channel both offer is one
    version). So, in this order, for the `slurm*` packages:
    1. a version the configured channel offers: 990, named by suite (`a=`) or codename (`n=`);
    2. a version only the other channel offers (the HPC image lists `insiders` for its pmix): -1, never installed by
       apt's own choice;
    3. anything else from packages.microsoft.com (a Release file that names neither): 990, as Azure CycleCloud pins
       them (Azure/cyclecloud-slurm azure-slurm-install/ubuntu.sh).
    pmix and every other package keep their priority. The set-up installs exact versions it read from the configured
    channel (resolve_release), which no pin can change; these records keep apt's own choices (a dependency, an
    administrator's `apt-get install slurm-smd-...`) on that channel too. tests/slurm/test_slurm_apt.py checks them
    with apt.
    """
    pins = [f"release {f}={SLURM_CHANNEL}" for f in "an"] + [f"release {f}={SLURM_OTHER_CHANNEL}" for f in "an"]
    priorities = ["990", "990", "-1", "-1", "990"]
    pins.append(f'origin "{SLURM_REPO_HOST}"')
    return "\n".join(
        f"Explanation: ndfleet (docs/slurm.md)\nPackage: slurm*\nPin: {pin}\nPin-Priority: {priority}\n"
        for pin, priority in zip(pins, priorities, strict=True)
    )


def _setup_context(spec: ClusterSpec, site: SlurmSite, role: str, island: IslandSpec | None) -> dict[str, Any]:
    """`island`: the compute node's, as given (its name may be the bundle's placeholder, so nothing is looked up
    by name); None for the controller and login."""
    assert spec.slurm is not None
    elastic = island.elastic if island is not None else None
    return {
        "role": role,
        "slurm_version": spec.slurm.version,
        "slurm_repo_url": SLURM_REPO_URL,
        "slurm_repo_host": SLURM_REPO_HOST,
        "slurm_channel": SLURM_CHANNEL,
        "slurm_other_channel": SLURM_OTHER_CHANNEL,
        "apt_preferences": slurm_apt_preferences(),
        "apt_preferences_path": APT_PREFERENCES_PATH,
        "apt_lock": APT_LOCK,
        "apt_lock_dir": posixpath.dirname(APT_LOCK),
        # The node set-up holds the lock at most as long as its unit may run (then systemd ends it, and the lock).
        "apt_lock_wait_s": spec.profile.thresholds.setup_timeout_s,
        "key_url": MICROSOFT_KEY_URL,
        "keyring_path": MICROSOFT_KEYRING,
        "dpkg_lock_timeout_s": DPKG_LOCK_TIMEOUT_S,
        "secret_wait_s": SECRET_WAIT_S,
        "secret_retry_s": SECRET_RETRY_S,
        "reap_call_timeout_s": REAP_CALL_TIMEOUT_S,
        "reap_timeout_s": REAP_TIMEOUT_S,
        "python_path": NODE_LIBRARY,
        "node_path": NODE_PATH,
        "awaiting_reason": AWAITING_BURNIN_REASON,
        "burnin_config": BURNIN_CONFIG,
        "burnin_every_s": BURNIN_EVERY_S,
        "burnin_level": BURNIN_LEVEL,
        "burnin_idle_partners": BURNIN_IDLE_PARTNERS,
        "burnin_settle_s": BURNIN_SETTLE_S,
        "burnin_timeout_s": BURNIN_TIMEOUT_S,
        "spares_config": SPARES_CONFIG,
        "spares_every_s": SPARES_EVERY_S,
        "roll_config": ROLL_CONFIG,
        "roll_every_s": ROLL_EVERY_S,
        "roll_program": ROLL_PROGRAM,
        "host_ledger": HOST_LEDGER,
        "host_ledger_dir": posixpath.dirname(HOST_LEDGER),
        "packages": list(ROLE_PACKAGES[role]),
        "slurm_uid": SLURM_UID,
        "http_timeout_s": HTTP_TIMEOUT_S,
        "imds_tags_url": IMDS_TAGS_URL,
        "imds_token_url": IMDS_TOKEN_URL,
        "imds_user_data_url": IMDS_USER_DATA_URL,
        "keyvault_api_version": KEYVAULT_API_VERSION,
        "tag_vault": TAG_VAULT,
        "tag_identity_client_id": TAG_IDENTITY_CLIENT_ID,
        "tag_nfs_account": TAG_NFS_ACCOUNT,
        "tag_db_host": TAG_DB_HOST,
        "munge_secret": MUNGE_SECRET,
        "db_secret": DB_SECRET,
        "nfs_mounts": list(NFS_MOUNTS),
        "nfs_options": NFS_OPTIONS,
        "state_disk_lun": STATE_DISK_LUN,
        "state_mount": CONTROLLER_STATE_MOUNT,
        "slurmd_options": slurmd_options(site, island.name) if island is not None and elastic is None else "",
        "elastic_name_program": ELASTIC_NAME_PROGRAM if elastic is not None else "",
        "island": island.name if island is not None else "",
        # An elastic node waits for the resume program to claim its VM; past the resume timeout Slurm gave up on it.
        "name_wait_s": elastic.resume_timeout_minutes * 60 if elastic is not None else 0,
        "elastic_config": ELASTIC_CONFIG,
        "elastic_state_dir": ELASTIC_STATE_DIR,
        "elastic_every_s": RECONCILE_EVERY_S,
        "reconcile_program": RECONCILE_PROGRAM,
        "setup_timeout_s": SETUP_TIMEOUT_S,
        # The controller's set-up needs its node-program library, which its boot step unpacks from userData.
        "bundle_unit": BUNDLE_UNIT if role == "controller" else "",
        "bundle_manifest": nodebundle.MANIFEST_PATH if role == "controller" else "",
        "reap_after_s": spec.slurm.remove_gone_nodes_after_minutes * 60,
        "slurmdbd_port": SLURMDBD_PORT,
        "database_user": DATABASE_USER,
        "database_name": DATABASE_NAME,
        "validator": VALIDATE_NODE_PATH,
        "node_app": NODE_APP_PATH,
        "report_path": REPORT_PATH,
        # slurmd kills a HealthCheckProgram that runs longer than 60 s (slurm.conf, HealthCheckProgram): decide
        # (a hung validation counts as a failure) before that.
        "validate_timeout_s": HEALTH_CHECK_VALIDATE_TIMEOUT_S,
        # The Epilog's validation: level epilog (the quick checks and the all-reduce) or quick, and its bound.
        "epilog_level": epilog_level(spec),
        "epilog_validate_timeout_s": epilog_validate_timeout_s(spec),
        "epilog_lock_wait_s": EPILOG_LOCK_WAIT_S,
        "health_check_lock": HEALTH_CHECK_LOCK,
        # A hardware fault found by the health check files the impact report as a failed boot validation does.
        "impact_launch": impact_launch(),
    }


def _render(template: str, site: SlurmSite, ctx: dict[str, Any]) -> str:
    return render(template, site, **ctx)


def _setup_files(site: SlurmSite, ctx: dict[str, Any]) -> list[MachineFile]:
    return [
        MachineFile.text(
            "/usr/local/sbin/ndfleet-slurm-setup", 0o755, _render("slurm/ndfleet-slurm-setup.sh.j2", site, ctx)
        ),
        _unit("ndfleet-slurm-setup.service", site, ctx),
    ]


def _unit(name: str, site: SlurmSite, ctx: dict[str, Any]) -> MachineFile:
    """A systemd unit ndfleet writes to /etc/systemd/system from templates/slurm/systemd/<name>.j2."""
    return MachineFile.text(f"/etc/systemd/system/{name}", 0o644, _render(f"slurm/systemd/{name}.j2", site, ctx))


def slurm_node_files(spec: ClusterSpec, island: IslandSpec) -> list[MachineFile]:
    """Files a compute node of `island` gets in its bootstrap when the cluster runs Slurm."""
    site = slurm_site(spec)
    ctx = _setup_context(spec, site, "compute", island)
    return [
        *_setup_files(site, ctx),
        MachineFile.text("/etc/systemd/system/slurmd.service.d/ndfleet.conf", 0o644,
                         _render("slurm/systemd/slurmd-ndfleet.conf.j2", site, ctx)),
        _unit("ndfleet-slurmd.service", site, ctx),
        MachineFile.text("/etc/systemd/system/ndfleet-validated.target.d/slurmd.conf", 0o644,
                         _render("slurm/systemd/validated-wants-slurmd.conf.j2", site, ctx)),
        MachineFile.text(HEALTH_CHECK_PROGRAM, 0o755, _render("slurm/ndfleet-slurm-health.sh.j2", site, ctx)),
        *([MachineFile.text(ELASTIC_NAME_PROGRAM, 0o755, _render("slurm/ndfleet-slurm-name.sh.j2", site, ctx))]
          if ctx["elastic_name_program"] else []),
    ]


def bootstrap_extensions(spec: ClusterSpec, island: IslandSpec) -> BootstrapExtensions | None:
    """What Slurm adds to an island's bootstrap (ndfleet.prepare passes it to render_bootstrap).

    The Slurm set-up is enabled (every boot) and started at first boot, beside validation. slurmd is started by
    ndfleet-slurmd.service, which the validated target wants and which waits for both the target and the set-up:
    a node that fails validation never starts slurmd (docs/slurm.md, "How slurmd starts on a compute node").
    None when the stack runs no Slurm.
    """
    if spec.scheduler != "slurm":
        return None
    return BootstrapExtensions(
        files=slurm_node_files(spec, island),
        enable_units=[SETUP_UNIT],
        start_units=[SETUP_UNIT],
        # The compute bundle travels in the Slurm vault, in parts (docs/bootstrap.md, "When the bundle outgrows
        # userData"): the node reads it with the identity and from the vault its set-up reads the munge key with.
        bundle_vault={"tag": TAG_VAULT, "client_id_tag": TAG_IDENTITY_CLIENT_ID},
    )


def burnin_config(spec: ClusterSpec) -> str:
    """The controller's burn-in node JSON (BURNIN_CONFIG): the first island's, every island has the same VM size."""
    return to_json(node_config(spec, spec.islands[0]))


def machine_user_data(spec: ClusterSpec, role: str) -> str:
    """The controller's or a login node's VM userData (ndfleet/slurm/userdata.py): on the controller its
    node-program library bundle (`controller_bundle`), then, on both, the Slurm release and configuration files.

    Unlike customData, `pulumi up` updates a VM's userData in place, and the machine picks the configuration's change
    up (ndfleet-slurm-config): scaling or adding an island, or any other change of slurm.conf, never rebuilds the
    controller. The bundle is read once, at first boot, and only if its sha256 is the one customData names: a new
    library changes customData too, and reaches the controller by a rebuild, never under its running programs. It
    holds no secret (slurmdbd.conf's password is filled in on the controller from Key Vault).
    """
    site = slurm_site(spec)
    assert spec.slurm is not None
    files = {f"/etc/slurm/{name}": content for name, content in config_files(site).items()}
    bundle = b""
    if role == "controller":
        ctx = _setup_context(spec, site, role, None)
        files[f"{CONFIG_DIR}/slurmdbd.conf.in"] = _render("slurm/slurmdbd.conf.j2", site, ctx)
        files[ELASTIC_CONFIG] = elastic_config(spec)
        # The burn-in's node JSON holds the GPU nodes' VM-size profile (GPU model, memory, bandwidth floors, NCCL
        # settings): here, not in customData, so a change of the GPU size never rebuilds the controller.
        files[BURNIN_CONFIG] = burnin_config(spec)
        # Which islands keep spares, and how many: here, so changing them never rebuilds the controller.
        files[SPARES_CONFIG] = spares_config(spec)
        files[ROLL_CONFIG] = roll_config(spec)  # each island's scale set where the stack names it (docs/upgrades.md)
        # The metrics agent's configuration (monitoring on): here, so turning monitoring on never rebuilds it.
        files.update(controller_config(spec, NODE_LIBRARY))
        bundle = controller_bundle(spec)
    user_data = compose({"version": spec.slurm.version, "files": files}, bundle)
    size = len(user_data) * 3 // 4 - user_data[-2:].count("=")
    if size > USER_DATA_MAX_BYTES:
        raise BootstrapTooLarge(
            f"the Slurm {role}'s userData is {size:,} bytes (library bundle {len(bundle):,}), over Azure's limit of "
            f"{USER_DATA_MAX_BYTES:,} bytes"
        )
    return user_data


def _programs_and_units(spec: ClusterSpec, site: SlurmSite, role: str, ctx: dict[str, Any]) -> list[MachineFile]:
    """The programs and units the controller's or a login node's customData carries (the controller's library
    aside): they depend only on the stack's fixed choices."""
    files = [
        *_setup_files(site, ctx),
        MachineFile.text(
            "/usr/local/sbin/ndfleet-slurm-config", 0o755, _render("slurm/ndfleet-slurm-config.sh.j2", site, ctx)
        ),
        _unit("ndfleet-slurm-config.service", site, ctx),
        _unit("ndfleet-slurm-config.timer", site, ctx),
    ]
    if role == "controller":
        files += [
            _unit("ndfleet-slurm-reap.service", site, ctx),
            _unit("ndfleet-slurm-reap.timer", site, ctx),
            *(MachineFile.text(path, 0o755, _render("slurm/ndfleet-elastic.sh.j2", site,
                                                    {**ctx, "program": program, "slurm_setting": what}))
              for path, program, what in ELASTIC_PROGRAMS),
            _unit("ndfleet-elastic.service", site, ctx),
            _unit("ndfleet-elastic.timer", site, ctx),
            MachineFile.text("/usr/local/sbin/ndfleet-burnin", 0o755, _render("slurm/ndfleet-burnin.sh.j2", site, ctx)),
            _unit("ndfleet-burnin.service", site, ctx),
            _unit("ndfleet-burnin.timer", site, ctx),
            _unit("ndfleet-spares.service", site, ctx),
            _unit("ndfleet-spares.timer", site, ctx),
            MachineFile.text(ROLL_PROGRAM, 0o755, _render("slurm/ndfleet-roll.sh.j2", site, ctx)),
            _unit("ndfleet-roll.service", site, ctx),
            _unit("ndfleet-roll.timer", site, ctx),
            *controller_files(spec, NODE_LIBRARY),
        ]
    return files


def controller_bundle(spec: ClusterSpec) -> bytes:
    """The controller's bundle (nodebundle format, xz): its node-program library alone, no activation command (the
    set-up unit requires the boot step's unit, so it starts once the library is on disk). Deterministic; packed once
    per process (nodebundle.pack caches by content)."""
    site = slurm_site(spec)
    ctx = _setup_context(spec, site, "controller", None)
    return _library_bundle(_programs_and_units(spec, site, "controller", ctx))[1]


def _library_bundle(files: list[MachineFile]) -> tuple[MachineFile, bytes]:
    library_file = controller_library(files)
    return library_file, nodebundle.pack([library_file], [])


def machine_bootstrap(spec: ClusterSpec, role: str) -> RenderedBootstrap:
    """The controller's or a login node's cloud-config; raises BootstrapTooLarge over Azure's limit.

    It depends only on the stack's fixed choices (paths, role, tag names), not on islands, node counts, the GPU
    nodes' VM size or the Slurm release, which travel in userData (`machine_user_data`): customData can only change
    by rebuilding the VM. The controller's carries the boot step (ndfleet-unpack, the manifest naming its library
    bundle's size and sha256, ndfleet-bundle.service) beside its programs and units; the library itself travels in
    userData. `binary_files` still lists the library, as the machine writes it, for `ndfleet render`.
    """
    if role not in ("controller", "login"):
        raise ValueError(f"unknown Slurm machine role {role!r}")
    site = slurm_site(spec)
    ctx = _setup_context(spec, site, role, None)
    files = _programs_and_units(spec, site, role, ctx)
    carried = list(files)
    if role == "controller":
        library_file, bundle = _library_bundle(files)
        carried = [*boot_step(nodebundle.manifest(bundle, None, None, more_follows=True), []), *files]
        files = [*carried, library_file]
    user_data = _render("slurm/machine-cloud-config.yaml.j2", site, {**ctx, "files": carried})
    unique_names(files, f"the Slurm {role}")
    rendered = RenderedBootstrap(
        user_data=user_data,
        files={"user-data": user_data, **{f.name: f.content for f in files if f.path != NODE_LIBRARY}},
        binary_files={f.name: f.data for f in files if f.path == NODE_LIBRARY},
        node_paths={f.name: f.path for f in files},
        modes={f.name: f.octal for f in files},
        custom_data_names=tuple(f.name for f in carried),
    )
    size = len(rendered.custom_data_bytes)
    if size > CUSTOM_DATA_MAX_BYTES:
        raise BootstrapTooLarge(
            f"the Slurm {role}'s customData is {size:,} bytes, over Azure's limit of {CUSTOM_DATA_MAX_BYTES:,} bytes"
        )
    return rendered


__all__ = ["bootstrap_extensions", "controller_bundle", "machine_bootstrap", "machine_user_data", "slurm_node_files"]

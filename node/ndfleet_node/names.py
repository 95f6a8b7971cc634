"""The names the tool and the node program share: one definition each.

The tool (Pulumi components, `status`, `plan`'s diff) writes these names onto Azure resources and Slurm nodes; the
node program, running on the VMs, reads them back. This module is the node package's, standard library only, so it
ships in the node bundle and the tool imports it from here; neither side spells a name of its own.
"""

# Scale-set and VM tags (Azure resource tags: keys up to 512 characters, values up to 256; docs/bootstrap.md).
TAG_PREFIX = "ndfleet:"
TAG_STACK = "ndfleet:stack"  # every resource: the Pulumi stack that made it
TAG_ISLAND = "ndfleet:island"  # a compute scale set: its island's name
TAG_ELASTIC = "ndfleet:elastic"  # a compute scale set: "true" when Slurm's power saving sizes it
TAG_SLURM_ROLE = "ndfleet:slurm-role"  # a Slurm machine: controller or login
TAG_IDENTITY_CLIENT_ID = "ndfleet:identity-client-id"  # the managed identity the machine's programs use
TAG_STORAGE_ACCOUNT = "ndfleet:storage-account"  # the cluster's storage account (BlobFuse2, reports)
TAG_LUSTRE_MGS = "ndfleet:lustre-mgs"  # Managed Lustre's MGS address
TAG_METRICS_ENDPOINT = "ndfleet:metrics-endpoint"  # the data collection endpoint's ingestion URL
TAG_METRICS_DCR = "ndfleet:metrics-dcr"  # the data collection rule's immutable id
TAG_VAULT = "ndfleet:slurm-vault"  # the Key Vault holding Slurm's secrets
TAG_NFS_ACCOUNT = "ndfleet:slurm-nfs"  # the storage account of the Slurm share (NFS)
TAG_DB_HOST = "ndfleet:slurm-db-host"  # the accounting database's host name
# A compute scale set: the version of its nodes' boot data (prepare: image, node boot data, Slurm release), and the
# Slurm release its nodes install. The roll (ndfleet_node/roll) reads both from the scale set's model.
TAG_BOOT_VERSION = "ndfleet:boot-version"
TAG_SLURM_RELEASE = "ndfleet:slurm-release"

# Slurm node reasons ndfleet sets, and reads back to tell its own drains from an operator's.
DRAIN_REASON_PREFIX = "ndfleet:"  # the health check's drains: "ndfleet:" and the failed check ids
BURNIN_REASON_PREFIX = "ndfleet:burnin:"  # the burn-in's drains and holds
AWAITING_BURNIN_REASON = "ndfleet:burnin:awaiting"  # a node registered, not yet burned in
RESUME_FAILED_REASON = "ndfleet:elastic:resume-failed"  # an elastic node Azure did not deliver
# The reason slurmctld drains a node with when its Epilog exits non-zero (slurm.conf(5), Epilog; SchedMD
# src/slurmctld/job_mgr.c, job_epilog_complete). ndfleet's Epilog is its health check alone, so the drain is its own:
# the next periodic pass replaces it with "ndfleet:" and the failed checks (slurm_health, the Epilog's failure marker).
EPILOG_ERROR_REASON = "Epilog error"
# The burn-in's Slurm reservations (node/ndfleet_node/burnin/slurm.py) are named this + a time stamp and a pid; the
# Epilog skips its check for a job of such a reservation (slurmd gives it SLURM_JOB_RESERVATION).
BURNIN_RESERVATION_PREFIX = "ndfleet-burnin-"
# Warm spares (docs/operations.md): each island's spares are held in the Slurm reservation of this name + island.
SPARES_RESERVATION_PREFIX = "ndfleet-spares-"
# The Slurm node Comment the health check sets with a failure drain: this prefix and Azure's physical host name.
HOST_COMMENT_PREFIX = "ndfleet-host:"
# A node on a host that failed twice: drained with this reason and never resumed (the host ledger).
REPEAT_HOST_REASON = "ndfleet:host:repeat-failure"
VM_FAILED_REASON = "ndfleet:elastic:vm-failed"  # an elastic node whose new VM Azure reports Failed: given up at once
# A node the roll drains to bring it to its scale set's latest model: this prefix and the roll's id.
ROLL_REASON_PREFIX = "ndfleet:roll:"
# The Slurm node feature a compute node registers with (slurmd -Z --conf "Feature=..."): this prefix and the boot
# version it runs, beside `island-<name>`.
BOOT_VERSION_FEATURE_PREFIX = "boot-"

# The NCCL configuration NCCL reads itself: the set-up writes it (from the node bundle's copy); the HPC image's own boot
# service writes it too, so the set-up unit is ordered after that service (docs/images.md, "Boot services").
NCCL_CONF_PATH = "/etc/nccl.conf"

# Kept present while Slurm has the node drained (slurm_health writes it, metrics reads it).
DRAIN_MARKER = "/var/lib/ndfleet/drained"

# The Slurm states the controller publishes (slurm_export) and `status` reads back.
SLURM_STATES = ("idle", "allocated", "mixed", "completing", "drained", "draining", "down", "powered_down",
                "awaiting_burnin", "spare", "other")

# The Slurm controller's job series (slurm_export writes them from Slurm accounting, `ndfleet goodput` reads them):
# each run of a job that was requeued or ended by a node failure, labels `job` (sacct's JobIDRaw) and `run` (0 for
# the first run, in start order); the end also carries `state`, the run's accounting state in lower case
# (node_fail, requeued, preempted, completed, ...). Values are unix seconds.
# The Slurm job id's label on the job series: not `job`, which Prometheus gives every scraped series itself (the
# scrape job's name) and under which a target's own `job` label is renamed `exported_job` (Prometheus configuration
# docs, `honor_labels`). Found by reading goodput against the twin's workspace.
JOB_LABEL = "slurm_job"
JOB_RUN_START_METRIC = "ndfleet_slurm_job_run_start_seconds"
JOB_RUN_END_METRIC = "ndfleet_slurm_job_run_end_seconds"
JOB_EXPORT_SUCCESS_METRIC = "ndfleet_slurm_job_export_success"  # 0: sacct failed, hung or said something unreadable
JOB_EXPORT_LEFT_OUT_METRIC = "ndfleet_slurm_job_export_left_out_jobs"  # such jobs past the export's cap

"""What a machine's boot data and the Azure resources that carry it agree on, below both (tests/test_layout.py).

The renderers (ndfleet/nodefiles, ndfleet/slurm/machines.py, ndfleet/monitoring/agent.py) write these figures into a
machine's files; the components (components/) set the same figures on the resources around the machine. The
components import them from here, never from a renderer: they receive the rendered boot data from ndfleet.prepare.
"""

from __future__ import annotations

# Azure's limit on customData, decoded (custom-data.md; osProfile.customData: "The maximum length of the binary array
# is 65535 bytes").
CUSTOM_DATA_MAX_BYTES = 65_535
# Azure's limit on userData: "The size can't exceed 64 KB" (Microsoft Learn, "User data for Azure Virtual Machine");
# the API answers "UserData must be in Base64 encoding and with a maximum length of 87384 characters"
# (Azure/azure-powershell#16597), i.e. 65,538 bytes decoded. Counted like customData: decoded bytes, at most 65,535.
USER_DATA_MAX_BYTES = 65_535
USER_DATA_MAX_CHARS = 87_384  # the same limit as the API counts it: base64 characters

# The node's health endpoint (ndfleet-node health), which the Application Health extension probes.
HEALTH_PATH = "/health"
# The Application Health extension's probes (components/ib_island.py HealthArgs): one every HEALTH_PROBE_INTERVAL_S,
# and HEALTH_PROBES_TO_AGREE answers in a row before the extension changes the instance's state.
HEALTH_PROBE_INTERVAL_S = 30
HEALTH_PROBES_TO_AGREE = 3

# The LUN of the Slurm controller's state disk: the component attaches it there, the set-up finds it there.
STATE_DISK_LUN = 0

# Azure Monitor's remote-write path on a data collection endpoint (Microsoft Learn: "Send Prometheus metrics from
# virtual machines ... to an Azure Monitor workspace"): <metricsIngestion endpoint>/dataCollectionRules/<immutable
# id>/streams/Microsoft-PrometheusMetrics/api/v1/write?api-version=2023-04-24. The data collection rule names the
# same stream.
INGEST_STREAM = "Microsoft-PrometheusMetrics"

__all__ = [
    "CUSTOM_DATA_MAX_BYTES",
    "HEALTH_PATH",
    "HEALTH_PROBES_TO_AGREE",
    "HEALTH_PROBE_INTERVAL_S",
    "INGEST_STREAM",
    "STATE_DISK_LUN",
    "USER_DATA_MAX_BYTES",
    "USER_DATA_MAX_CHARS",
]

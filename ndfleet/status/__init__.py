"""`ndfleet status`: what a deployed stack's nodes are doing, read from Azure (Reader role is enough).

Modules, one job each: `facts` (what Resource Manager says, parsed from its JSON into plain data), `arm_read`
(which scale sets are the stack's, read with azure-mgmt-compute), `prometheus` (the workspace's query API),
`metrics_view` (the nodes' validation metrics and the controller's Slurm states, per node), `read` (one read:
credentials, Resource Manager, metrics), `classify` (joining both per node, deciding who needs a person and what to
do; cost per hour from the price table `ndfleet.cost.prices`), `render` (table and JSON, schema in `schema.json`).
The command itself: `ndfleet/commands/status.py`. docs/operations.md says what every state means.
"""

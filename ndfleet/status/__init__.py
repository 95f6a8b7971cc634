"""`ndfleet status`: what a deployed stack's nodes are doing, read from Azure (Reader role is enough).

Modules, one job each: `facts` (what Resource Manager says, parsed from its JSON into plain data), `locate` (which
scale sets belong to the stack), `arm_read` (reading them with azure-mgmt-compute), `prometheus` (the nodes'
validation metrics and the controller's Slurm states from the Azure Monitor workspace's query API), `classify`
(joining both per node, deciding who needs a person and what to do), `render` (table and JSON, schema in
`schema.json`), `prices` (cost per hour). The command itself: `ndfleet/commands/status.py`. docs/operations.md
says what every state means.
"""

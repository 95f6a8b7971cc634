"""Fleet monitoring as code: what nodes export (exporters), the alert table (alerts), Grafana dashboards
(dashboards) and the node-side agent configuration (agent), all generated from the spec and its VM-size profile.
The Azure resources are in components/monitoring.py; docs/monitoring.md describes the whole."""

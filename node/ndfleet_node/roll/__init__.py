"""The roll: bring an island's nodes to its scale set's latest model, batch by batch, job-safe (docs/upgrades.md)."""

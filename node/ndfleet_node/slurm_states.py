"""Slurm node reasons ndfleet sets, shared by the node's health check, registration and burn-in."""

AWAITING_BURNIN_REASON = "ndfleet:burnin:awaiting"

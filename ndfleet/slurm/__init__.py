"""Slurm on the validated islands: configuration rendered from the spec (plain functions, no Pulumi)."""

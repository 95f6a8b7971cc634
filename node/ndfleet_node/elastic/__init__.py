"""Elastic islands on the Slurm controller: Slurm's power saving programs that create and delete scale-set VMs.

`resume`, `suspend` and `resume-fail` are Slurm's ResumeProgram, SuspendProgram and ResumeFailProgram; `reconcile`
runs on a timer. Standard library only; every Resource Manager request and every scontrol call is bounded in time
and size. docs/elastic.md explains the design and its sources.
"""

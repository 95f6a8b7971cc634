"""ndfleet's node program: runs on every cluster node (set-up, validation, health endpoint, burn-in, ...).

Standard library only, Python >= 3.10 (the Ubuntu 22.04 HPC image's python3). It never imports the `ndfleet`
tool, Pulumi or pydantic: it reaches the node inside customData as a zipapp and reads its per-stack figures
from one rendered JSON file.
"""

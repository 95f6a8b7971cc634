"""ndfleet's Pulumi program: read the stack config, validate it into a cluster spec, create the cluster."""

from components.config import SpecError
from components.program import ProgramError, deploy, fail, run_preflight_if_enabled, spec_from_stack

try:
    spec = spec_from_stack()
    run_preflight_if_enabled(spec)
    deploy(spec)
except (SpecError, ProgramError) as error:
    fail(str(error))

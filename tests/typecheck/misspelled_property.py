"""Must FAIL the type check: .ci/run proves that mypy really checks properties against pulumi-azure-native.

`single_placement_groupp` is a misspelling of `single_placement_group`; if mypy accepted this file, the type check
of the program would prove nothing about property names.
"""

import pulumi_azure_native.compute as compute

compute.VirtualMachineScaleSet(
    "misspelled",
    resource_group_name="rg",
    single_placement_groupp=True,
)

"""The Linux login every ndfleet machine gets: SSH public key only, password login disabled, the VM agent on.

One definition for the scale sets and the single VMs, so no machine can be created with a password login.
"""

from __future__ import annotations

import pulumi
import pulumi_azure_native.compute as compute


def ssh_key_only(admin_username: str, ssh_public_key: pulumi.Input[str]) -> compute.LinuxConfigurationArgs:
    """`linuxConfiguration` with one authorized key for the admin user and password authentication off."""
    return compute.LinuxConfigurationArgs(
        disable_password_authentication=True,
        provision_vm_agent=True,
        ssh=compute.SshConfigurationArgs(
            public_keys=[
                compute.SshPublicKeyArgs(path=f"/home/{admin_username}/.ssh/authorized_keys", key_data=ssh_public_key)
            ]
        ),
    )

"""The stack -> spec step of the commands that read Azure (preflight, status, impact): the stack file through the
prepare step every command runs, and its `azure-native:` provider settings."""

from __future__ import annotations

import base64
import struct

from ndfleet.prepare import PrepareError, prepare_config
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.problems import SpecError
from ndfleet.stackconfig.stackfile import StackFileError, load_stack


class StackRefused(Exception):
    """The stack cannot be read or is refused; str() says why (callers add their command's prefix)."""


def _placeholder_ssh_key() -> str:
    """A well-formed ed25519 key line that stands in for an encrypted (secure) sshPublicKey: readers never use it."""
    kind = b"ssh-ed25519"
    blob = struct.pack(">I", len(kind)) + kind + struct.pack(">I", 32) + bytes(32)
    return "ssh-ed25519 " + base64.b64encode(blob).decode() + " ndfleet-preflight-placeholder"


def load_stack_spec(
    stack_name: str | None, stack_file: str | None, name_override: str | None = None
) -> tuple[ClusterSpec, dict[str, str]]:
    """The stack's validated spec and its `azure-native:` provider settings; StackRefused with the reason."""
    try:
        stack = load_stack(name=stack_name, path=stack_file, stack_name=name_override)
    except StackFileError as exc:
        raise StackRefused(str(exc)) from None
    raw = stack.ndfleet_config
    if "ndfleet:sshPublicKey" in stack.secret_keys:
        raw["sshPublicKey"] = _placeholder_ssh_key()
    try:
        # The same prepare step as plan, render and `pulumi up`: a stack they refuse is not read either.
        spec = prepare_config(raw, stack.name, stack.engine_config).spec
    except (SpecError, PrepareError) as exc:
        raise StackRefused(str(exc)) from None
    prefix = "azure-native:"
    provider = {k[len(prefix) :]: v for k, v in stack.engine_config.items() if k.startswith(prefix)}
    return spec, provider

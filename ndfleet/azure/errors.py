"""Errors preflight raises: one that stops it from asking Azure, one that stops a Pulumi program."""

from __future__ import annotations


class CannotCheck(Exception):
    """Preflight could not ask Azure at all (exit 2). str() is the message for the user; `details` what the library
    said (shown with --verbose). `transient`: asking again later may work (network, throttling, a 5xx); everything
    else (no credentials, 401, 403, 404, a bad setting) is permanent and `status --watch` stops on it."""

    def __init__(self, message: str, details: str = "", *, transient: bool = False):
        self.details = details
        self.transient = transient
        super().__init__(message)


class PreflightFailed(Exception):
    """Raised by `enforce_preflight`: a check failed (exit_code 1) or Azure could not be asked (2)."""

    def __init__(self, message: str, exit_code: int):
        self.exit_code = exit_code
        super().__init__(message)


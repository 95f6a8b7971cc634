"""Errors preflight raises: one that stops it from asking Azure, one that stops a Pulumi program."""

from __future__ import annotations


class CannotCheck(Exception):
    """Preflight could not ask Azure at all (exit 2). str() is the message for the user; `details` what the library
    said (shown with --verbose)."""

    def __init__(self, message: str, details: str = ""):
        self.details = details
        super().__init__(message)


class PreflightFailed(Exception):
    """Raised by `enforce_preflight`: a check failed (exit_code 1) or Azure could not be asked (2)."""

    def __init__(self, message: str, exit_code: int):
        self.exit_code = exit_code
        super().__init__(message)


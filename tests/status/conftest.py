"""The loopback HTTPS stand-in's certificate authority (tests/status/standin.py), for the hostile-answer tests."""

from tests.status.standin import tls  # noqa: F401

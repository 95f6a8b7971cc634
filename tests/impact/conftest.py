"""The hostile-answer tests here use the same loopback HTTPS stand-in and proxy-free environment as tests/status."""

from tests.status.conftest import no_proxy_from_the_environment, tls  # noqa: F401

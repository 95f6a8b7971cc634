"""The loopback HTTPS stand-in's certificate authority (tests/status/standin.py), for the hostile-answer tests; and no
proxy from the environment, so the real transport talks to the stand-in directly (test_status_proxy sets its own)."""

from collections.abc import Iterator

import pytest

from tests.status.standin import tls  # noqa: F401


@pytest.fixture(autouse=True)
def no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    yield

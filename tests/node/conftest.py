"""Fixtures shared by the elastic programs' tests: test_elastic.py's Resource Manager stand-in and `world`."""

from tests.node.test_elastic import azure, world  # noqa: F401

"""The doubles moved to fsr.testing.fakes (so bench/ need not import tests/); import them from there."""

from fsr.testing.fakes import *  # noqa: F403

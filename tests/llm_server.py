"""The scripted server moved to fsr.testing.llm_server (so bench/ need not import tests/); import it from there."""

from fsr.testing.llm_server import *  # noqa: F403

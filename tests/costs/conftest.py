"""The run fixtures (the scripted order desk) for cost tests that drive real runs."""

from tests.runs.conftest import Desk, actor, desk  # noqa: F401

from tests.runs.conftest import Desk, actor, desk  # noqa: F401

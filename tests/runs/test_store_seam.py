"""The engine's store seam (apps/runs/engine/seam.py) is what the run store implements: every method the
engine may call exists on `RunStore` with the same parameters, so a call typed through `Store` lands."""

import inspect
from pathlib import Path

import apps.runs.engine as engine
from apps.runs.engine.seam import Store
from apps.runs.store.run_store import RunStore


def test_the_run_store_has_every_method_of_the_seam_with_its_parameters():
    methods = [name for name, value in vars(Store).items() if not name.startswith("_") and callable(value)]
    assert "complete_call" in methods and "follow_approval" in methods
    for name in methods:
        ours = inspect.signature(getattr(Store, name)).parameters
        theirs = inspect.signature(getattr(RunStore, name)).parameters
        assert list(ours) == list(theirs), name
        for parameter in ours:
            assert ours[parameter].kind == theirs[parameter].kind, (name, parameter)
            assert ours[parameter].default == theirs[parameter].default, (name, parameter)


def test_the_engine_imports_no_store_module():


    for path in Path(engine.__file__).parent.glob("*.py"):
        assert "apps.runs.store" not in "".join(
            line for line in path.read_text().splitlines(keepends=True) if line.startswith(("from ", "import "))
        ), path.name

"""Every CSV export (runs, costs, audit) shows text that looks like a spreadsheet formula as text."""

from __future__ import annotations

import csv
import io

import pytest

from apps.runs import services, worker
from tests.runs.conftest import INPUTS

FORMULAS = ["=HYPERLINK(\"http://evil.example\")", "+1+1", "-2+3", "@SUM(A1)", "\tTAB", "\rCR"]


def exported(client, path: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(b"".join(client.get(path).streaming_content).decode())))


@pytest.mark.django_db
def test_no_export_cell_starts_a_formula(client, desk, owner):
    client.force_login(owner.user)
    agent = desk.agent("Echo", [{"say": FORMULAS[2]}], [], model=FORMULAS[3])
    crew = desk.sequential(FORMULAS[0], [("echo", agent, "Say it for {order_id}.", [])], inputs=INPUTS)
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": FORMULAS[1],
                                                                          "amount_cents": 1}, enqueue=False)
    assert worker.drive_run(run_id=run.id).status == "succeeded"
    files = {name: exported(client, f"/{name}/export.csv") for name in ("runs", "costs", "audit")}
    for name, rows in files.items():
        for row in rows[1:]:
            for cell in row:
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (name, cell)
    runs = files["runs"]
    cells = {h: v for h, v in zip(runs[0], runs[1], strict=True)}
    assert cells["crew_name"] == "'" + FORMULAS[0]
    assert cells["output"].startswith("'-2+3")
    costs = [dict(zip(files["costs"][0], r, strict=True)) for r in files["costs"][1:]]
    assert costs and all(row["model"] == "'" + FORMULAS[3] for row in costs)
    audit = [dict(zip(files["audit"][0], r, strict=True)) for r in files["audit"][1:]]
    assert "'" + FORMULAS[0] in {row["target_label"] for row in audit}

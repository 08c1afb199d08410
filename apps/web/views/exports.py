"""Exports: CSV of runs, cost rows and the audit log (streamed in bounded memory), JSON of a run's trace.

CSV rows come from `.values_list(...).iterator(chunk_size=...)` and are written one at a time
into a `StreamingHttpResponse`, so a million-row export holds one chunk in memory, not the
file. Everything that might carry a secret goes through `apps.runs.history.mask` (redaction
plus the configured sensitive argument names).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils import timezone

from apps.audit import selectors as audit
from apps.costs import selectors as costs
from apps.runs import history, selectors
from apps.web.access import member_required
from apps.web.forms import AuditFilterForm, CostRangeForm, RunFilterForm
from apps.web.views.audit import audit_filters
from apps.web.views.runs import run_filters

CHUNK = 2000


class _Line:
    """A file-like object whose write returns the line, for csv.writer inside a generator."""

    def write(self, value: str) -> str:
        return value


# A spreadsheet reads a cell starting with one of these as a formula (CSV injection): a run's
# output, an error text or an audit label written by anyone could then run in the reader's sheet.
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def inert(cell: Any) -> Any:
    """The cell as a spreadsheet shows it as text: a leading apostrophe before a formula lead."""
    if isinstance(cell, str) and cell.startswith(FORMULA_LEADS):
        return "'" + cell
    return cell


def csv_rows(header: list[str], rows: Iterable[Iterable[Any]]) -> Iterator[str]:
    """Every export's lines: each text cell made inert for spreadsheets."""
    writer = csv.writer(_Line())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow([inert(cell) for cell in row])


def streamed_csv(name: str, lines: Iterator[str]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="airlock-{name}-{stamp}.csv"'
    return response


def _json(value: Any) -> str:
    return json.dumps(history.mask(value), sort_keys=True, default=str)


RUN_COLUMNS = ["id", "crew_name", "status", "started_by_label", "created_at", "started_at", "finished_at", "hops",
               "tool_calls", "tokens_in", "tokens_cached", "tokens_out", "cost_usd", "cost_unknown_calls",
               "error_class", "error", "inputs", "output"]


@member_required()
def runs_csv(request: HttpRequest) -> StreamingHttpResponse:
    """The run history as filtered on the runs page (all pages)."""
    form = RunFilterForm(request.GET or None)
    runs = history.search_runs(org_id=request.actor.org_id, filters=run_filters(form))

    def rows() -> Iterator[list[Any]]:
        for values in runs.values_list(*RUN_COLUMNS).iterator(chunk_size=CHUNK):
            row = dict(zip(RUN_COLUMNS, values, strict=True))
            row["cost_usd"] = "unknown" if row["cost_usd"] is None else row["cost_usd"]
            secrets = history.secret_values(row["inputs"])  # also where the output quotes them
            row["output"] = history.mask_values(history.mask(row["output"]), secrets)
            row["error"] = history.mask_values(history.mask(row["error"]), secrets)
            row["inputs"] = _json(row["inputs"])
            yield [row[c] for c in RUN_COLUMNS]

    return streamed_csv("runs", csv_rows(RUN_COLUMNS, rows()))


COST_COLUMNS = ["created_at", "run_id", "crew_id", "agent_id", "provider", "model", "input_tokens", "cached_tokens",
                "output_tokens", "cost_usd", "price_source", "latency_ms"]


@member_required()
def costs_csv(request: HttpRequest) -> StreamingHttpResponse:
    """One row per model call in the range (unknown prices say `unknown`); `?run=<id>`: that run's calls only."""
    if request.GET.get("run"):
        run = selectors.get_run(org_id=request.actor.org_id, run_id=request.GET["run"])  # NotFound: 404
        usage = costs.usage_rows(org_id=request.actor.org_id).filter(run_id=run.id).order_by("created_at")
    else:
        form = CostRangeForm(request.GET or None)
        values = form.cleaned_data if form.is_valid() else {}
        since, until = costs.parse_range(values.get("since"), values.get("until"))
        usage = costs.usage_rows(org_id=request.actor.org_id, since=since, until=until).order_by("created_at")

    def rows() -> Iterator[list[Any]]:
        for row in usage.values_list(*COST_COLUMNS).iterator(chunk_size=CHUNK):
            row = list(row)
            row[9] = "unknown" if row[9] is None else row[9]
            yield row

    return streamed_csv("costs", csv_rows(COST_COLUMNS, rows()))


AUDIT_COLUMNS = ["seq", "created_at", "action", "actor_label", "target_type", "target_id", "target_label", "data",
                 "ip", "prev_hash", "hash"]


@member_required("audit.view")
def audit_csv(request: HttpRequest) -> StreamingHttpResponse:
    """The audit log as filtered on the audit page, with each row's hash (to check the chain elsewhere)."""
    filters = audit_filters(AuditFilterForm(request.GET or None))
    events = audit.audit_events(org_id=request.actor.org_id, **filters)

    def rows() -> Iterator[list[Any]]:
        for row in events.values_list(*AUDIT_COLUMNS).iterator(chunk_size=CHUNK):
            row = list(row)
            row[7] = _json(row[7])
            yield row

    return streamed_csv("audit", csv_rows(AUDIT_COLUMNS, rows()))


@member_required()
def run_trace_json(request: HttpRequest, run_id) -> HttpResponse:
    run = selectors.get_run(org_id=request.actor.org_id, run_id=run_id)
    response = JsonResponse(history.run_trace(run), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="airlock-run-{run.id}.json"'
    return response

"""Sorting and pagination for list pages, driven by the query string (`?sort=-name&page=2`) so a
reload, a bookmark or the back button shows the same rows. Filters are the view's own GET fields."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    order_by: str = ""  # empty: not sortable
    sort_url: str = ""
    aria_sort: str = ""  # "ascending" / "descending" on the sorted column


@dataclass(frozen=True)
class Table:
    page: Page
    columns: list[Column]
    query: str  # the current query string without `page`, for pagination links
    filtered: bool  # any filter given: an empty page says "nothing matches", not "nothing yet"


def sorted_page(request: HttpRequest, rows: QuerySet, *, columns: list[tuple[str, str, str]], default: str,
                filters: tuple[str, ...] = (), per_page: int = 25) -> Table:
    """`columns`: (key, label, order_by field or ""). `default`: a key, `-` first for descending."""
    sortable = {key: field for key, _, field in columns if field}
    wanted = request.GET.get("sort") or default
    key = wanted.lstrip("-")
    if key not in sortable:
        wanted, key = default, default.lstrip("-")
    descending = wanted.startswith("-")
    field = sortable[key]
    rows = rows.order_by(f"-{field}" if descending else field, "pk")
    page = Paginator(rows, per_page).get_page(request.GET.get("page"))
    base = request.GET.copy()
    base.pop("page", None)
    built = []
    for col_key, label, order_by in columns:
        url, aria = "", ""
        if order_by:
            params = base.copy()
            params["sort"] = f"-{col_key}" if col_key == key and not descending else col_key
            url = f"?{params.urlencode()}"
            if col_key == key:
                aria = "descending" if descending else "ascending"
        built.append(Column(col_key, label, order_by, url, aria))
    return Table(page=page, columns=built, query=base.urlencode(),
                 filtered=any(request.GET.get(name) for name in filters))

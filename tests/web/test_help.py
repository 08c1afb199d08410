"""Inline help has one source (apps/web/help.py); docs/concepts.md repeats it word for word."""

from __future__ import annotations

from pathlib import Path

from apps.web.help import TOPICS

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def test_concepts_doc_repeats_every_inline_explanation():
    text = " ".join(CONCEPTS.read_text().split())
    missing = [f"{topic}.{value}" for topic, (_, items) in TOPICS.items() for value, _, line in items
               if line not in text]
    assert missing == []


def test_the_pages_show_the_same_words(client, admin):
    from tests.conftest import signed_in

    html = signed_in(client, admin).get("/servers/catalog/").content.decode()
    assert "Trust tiers: what they mean" in html and "Anyone else&#x27;s code: sandboxed" in html

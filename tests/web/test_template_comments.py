"""Django's `{# ... #}` comments end at the line's end: one spanning lines is shown to the user as text (it was,
on the run page, the server forms and unknown calls). Multi-line notes use {% comment %}."""

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def test_no_template_comment_spans_lines():
    open_ended = [f"{path.relative_to(TEMPLATES)}:{n}" for path in TEMPLATES.rglob("*.html")
                  for n, line in enumerate(path.read_text().splitlines(), 1)
                  if "{#" in line and "#}" not in line[line.index("{#"):]]
    assert not open_ended, f"{{# ... #}} comments that span lines (shown as text): {open_ended}"

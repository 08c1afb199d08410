"""Static files storage for production: hashed names and compressed copies (whitenoise), without
following source-map comments.

Vendored builds (Tabler, Chart.js) end with a `sourceMappingURL` comment naming a `.map` file that
is not shipped. Django's manifest storage treats that comment as a reference it must rewrite and
fails `collectstatic` when the target is missing, which left the production image with no static
files at all. Source maps only serve a developer's browser tools, so references to them are left as
they are (a missing map costs devtools a 404); every other reference (CSS `url()`, `@import`) still
must resolve, and a missing one still fails the build.
"""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


def _without_source_maps(patterns: tuple) -> tuple:
    """Django's (extension, patterns) table minus the entries that match `sourceMappingURL`."""
    kept = []
    for extension, entries in patterns:
        entries = tuple(e for e in entries if "sourceMappingURL" not in (e[0] if isinstance(e, tuple) else e))
        if entries:
            kept.append((extension, entries))
    return tuple(kept)


class ProductionStaticStorage(CompressedManifestStaticFilesStorage):
    patterns = _without_source_maps(CompressedManifestStaticFilesStorage.patterns)

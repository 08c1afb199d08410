"""Canonical JSON and the hashes the ledger and approvals bind to."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def args_hash(arguments: Any) -> str:
    """sha256 of the canonical JSON of a call's arguments: an edit is a new hash."""
    return hashlib.sha256(canonical_json(arguments or {}).encode()).hexdigest()

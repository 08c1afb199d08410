"""Tool names as models see them. OpenAI function names allow only [A-Za-z0-9_-] (no dots), so
`orders.refund_order` is offered as `orders__refund_order` and mapped back on the way in."""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def model_tool_name(qualified_name: str) -> str:
    server, _, tool = qualified_name.partition(".")
    return _UNSAFE.sub("_", f"{server}__{tool}" if tool else server)[:64]


def qualified_name(name: str, *, offered: dict[str, str], known: set[str] | frozenset[str]) -> str:
    """The qualified name a model meant: what we offered under that name, a known name as is, or `a__b` -> `a.b`.

    A model may name a tool it was never offered; the policy point decides what happens then.
    """
    if name in offered:
        return offered[name]
    if name in known:
        return name
    if "__" in name:
        return name.replace("__", ".", 1)
    return name

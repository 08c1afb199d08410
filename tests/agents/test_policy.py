"""The policy point: one table of cases, the rules of ARCHITECTURE.md section 5."""

from __future__ import annotations

import pytest

from apps.agents.policy import CallFacts, decide, grant_problem

BASE = {"tool": "orders.refund_order", "risk": "read", "state": "active", "pinned": True, "trust_tier": "internal",
        "grant": "auto"}

# (facts that differ from BASE, expected decision, expected rule)
CASES = [
    ({}, "allow", "auto"),
    ({"grant": None}, "deny", "not_granted"),
    ({"grant": "deny"}, "deny", "grant_deny"),
    ({"grant": "deny", "risk": "dangerous"}, "deny", "grant_deny"),
    ({"state": "quarantined"}, "deny", "tool_quarantined"),
    ({"state": "disabled"}, "deny", "tool_disabled"),
    ({"state": "removed"}, "deny", "tool_removed"),
    ({"pinned": False}, "deny", "not_pinned"),
    ({"risk": "write"}, "allow", "auto"),
    ({"risk": "write", "grant": "approve"}, "hold", "grant_approve"),
    ({"risk": "dangerous"}, "hold", "dangerous"),
    ({"risk": "dangerous", "standing_approval": True}, "hold", "dangerous"),
    ({"risk": "write", "trust_tier": "third_party"}, "hold", "third_party_write"),
    ({"risk": "write", "trust_tier": "third_party", "standing_approval": True}, "hold", "third_party_write"),
    ({"risk": "read", "trust_tier": "third_party"}, "allow", "auto"),
    ({"risk": "write", "trust_tier": "official"}, "allow", "auto"),
    ({"risk": "write", "tainted": True}, "hold", "tainted"),
    ({"risk": "write", "tainted": True, "standing_approval": True}, "hold", "tainted"),
    ({"risk": "read", "tainted": True}, "allow", "auto"),
    ({"grant": "approve", "standing_approval": True}, "allow", "standing_approval"),
    ({"condition": "amount_cents > 5000", "arguments": {"amount_cents": 9000}}, "hold", "condition"),
    ({"condition": "amount_cents > 5000", "arguments": {"amount_cents": 100}}, "allow", "auto"),
    ({"condition": "amount_cents > 5000", "arguments": {"order_id": "A1"}}, "hold", "condition_error"),
    ({"condition": "amount_cents > 5000", "arguments": {"amount_cents": "lots"}}, "hold", "condition_error"),
    ({"condition": "amount_cents > 5000", "arguments": {"amount_cents": 9000}, "standing_approval": True},
     "allow", "standing_approval"),
    ({"condition": "amount_cents > 5000"}, "allow", "auto_with_condition"),
    ({"condition": "amount_cents > 5000", "state": "quarantined", "arguments": {"amount_cents": 1}}, "deny",
     "tool_quarantined"),
    ({"risk": "unknown"}, "deny", "bad_risk"),
]


@pytest.mark.parametrize(("changes", "decision", "rule"), CASES)
def test_the_policy_table(changes, decision, rule):
    result = decide(CallFacts(**{**BASE, **changes}))
    assert (result.decision, result.rule) == (decision, rule)
    assert result.reason  # every decision explains itself to a person


def test_reasons_name_the_tool_and_the_rule():
    assert "dangerous" in decide(CallFacts(**{**BASE, "risk": "dangerous"})).reason
    assert "not on this agent's allowlist" in decide(CallFacts(**{**BASE, "grant": None})).reason
    assert "amount_cents > 5000" in decide(CallFacts(**{**BASE, "condition": "amount_cents > 5000",
                                                        "arguments": {"amount_cents": 6000}})).reason


def test_a_denied_tool_is_not_offered_but_a_held_one_is():
    assert not decide(CallFacts(**{**BASE, "state": "quarantined"})).offered
    assert decide(CallFacts(**{**BASE, "risk": "dangerous", "grant": "approve"})).offered


@pytest.mark.parametrize(("risk", "tier", "state", "policy", "refused"), [
    ("dangerous", "internal", "active", "auto", "dangerous"),
    ("dangerous", "internal", "active", "approve", None),
    ("write", "third_party", "active", "auto", "third-party"),
    ("write", "third_party", "active", "approve", None),
    ("read", "third_party", "active", "auto", None),
    ("write", "official", "active", "auto", None),
    ("read", "internal", "quarantined", "auto", "quarantined"),
    ("read", "internal", "removed", "approve", "removed"),
    ("read", "internal", "quarantined", "deny", None),
    ("read", "internal", "active", "sometimes", "Choose"),
])
def test_the_form_refuses_what_policy_forbids(risk, tier, state, policy, refused):
    problem = grant_problem(tool="srv.tool", risk=risk, state=state, trust_tier=tier, policy=policy)
    if refused is None:
        assert problem is None
    else:
        assert refused in problem


def _write(**values) -> CallFacts:
    base = dict(tool="inbox.send", risk="write", state="active", pinned=True, trust_tier="internal", grant="auto",
                arguments={"to": "x@example.com"})
    return CallFacts(**{**base, **values})


def test_a_crew_that_denies_untrusted_content_denies_only_the_holds_caused_by_what_the_run_read():
    assert decide(_write(tainted=True, on_untrusted="deny")).rule == "tainted_denied"
    assert decide(_write(tainted=True, on_untrusted="deny")).decision == "deny"
    unrequested = decide(_write(unrequested=("to: x@example.com",), copied_source="inbox.read", on_untrusted="deny"))
    assert (unrequested.decision, unrequested.rule) == ("deny", "unrequested_destination_denied")
    assert "inbox.read" in unrequested.reason
    # A dangerous tool in a clean run is held as ever: the crew's setting is about untrusted content only.
    assert decide(_write(risk="dangerous", on_untrusted="deny")).decision == "hold"
    # Provenance holds are for writes: a read with the same arguments runs.
    assert decide(_write(risk="read", unrequested=("to: x@example.com",))).decision == "allow"
    held = decide(_write(copied=("body",)))
    assert (held.decision, held.rule) == ("hold", "copied_from_results")

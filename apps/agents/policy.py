"""The policy point: one pure function decides every tool call (ARCHITECTURE.md section 5).

`decide` takes plain facts (no ORM, no I/O) so the engine, the MCP gateway and the agent
page's "effective permissions" panel all ask the same question and get the same answer.
`grant_problem` is the save-time twin: which grants the form must refuse, and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from apps.agents.conditions import ConditionError, parse_condition

Decision = Literal["allow", "hold", "deny"]
GrantPolicy = Literal["auto", "approve", "deny"]

RISKS = ("read", "write", "dangerous")
TIERS = ("official", "internal", "third_party")
WRITES = {"write", "dangerous"}
# Holds caused by what the run read rather than by the tool or the grant: a crew may deny these instead.
UNTRUSTED_RULES = ("tainted", "tainted_open_world", "unrequested_destination", "copied_from_results")
ON_UNTRUSTED = ("hold", "deny")


@dataclass(frozen=True)
class CallFacts:
    """Everything the policy point may look at for one call (or one tool, when `arguments` is None)."""

    tool: str  # qualified name, for the reasons
    risk: str  # read / write / dangerous (as the admin set it; never lowered by the server's claims)
    state: str  # active / quarantined / disabled / removed
    pinned: bool  # the current definition is the one an admin approved
    trust_tier: str  # of the tool's server: official / internal / third_party
    grant: str | None  # the agent's policy for this tool: auto / approve / deny, None when not granted
    condition: str = ""  # escalates auto to approve when true
    arguments: Mapping[str, Any] | None = None  # None: a dry run before any call (offering the tool)
    tainted: bool = False  # the run has read untrusted content
    open_world: bool = False  # the tool reaches the open internet (fetch, search): its arguments can carry data out
    taint_source: str = ""  # what tainted the run ("the result of web.fetch (call 3f2a...)"), for the reason
    standing_approval: bool = False  # a person's standing approval matches this call
    # Provenance of a write's arguments (apps.registry.provenance), worked out by the engine: destinations the
    # run's request never mentions, arguments copied from a tool result.
    unrequested: tuple[str, ...] = ()
    copied: tuple[str, ...] = ()
    copied_source: str = ""  # the tool whose result they came from
    on_untrusted: str = "hold"  # the crew's choice for calls held because of untrusted content: hold or deny


@dataclass(frozen=True)
class PolicyDecision:
    decision: Decision
    reason: str  # shown to people (inbox, run trace, effective permissions)
    rule: str  # stable machine name of the deciding rule

    @property
    def offered(self) -> bool:
        """Whether the model may see the tool at all: anything not denied outright."""
        return self.decision != "deny"


def decide(facts: CallFacts) -> PolicyDecision:
    """Allow, hold for a person, or deny one tool call, with the reason. Default deny.

    Order: refusals first (not granted, granted as deny, tool not active, definition not
    pinned), then every reason a person must look (dangerous, third-party write, tainted run,
    grant says approve, condition true). A standing approval lifts only the grant's own holds
    (approve, condition), never the rules that always need a human.
    """
    denial = _denial(facts)
    if denial is not None:
        return denial
    holds = _human_required(facts)
    if holds:
        untrusted = next((h for h in holds if h[0] in UNTRUSTED_RULES), None)
        if untrusted is not None and facts.on_untrusted == "deny":
            return PolicyDecision("deny", f"{untrusted[1]} This crew denies such calls instead of holding them "
                                          "(untrusted content: deny).", f"{untrusted[0]}_denied")
        return PolicyDecision("hold", holds[0][1], holds[0][0])
    grant_holds = _grant_holds(facts)
    if grant_holds:
        if facts.standing_approval:
            return PolicyDecision("allow", f"A standing approval covers this call ({grant_holds[0][1]}).",
                                  "standing_approval")
        return PolicyDecision("hold", grant_holds[0][1], grant_holds[0][0])
    if facts.condition and facts.arguments is None:
        return PolicyDecision("allow", f"Runs without asking, unless {facts.condition.strip()} "
                                       "(then a person approves it).", "auto_with_condition")
    return PolicyDecision("allow", "Granted as auto: runs without asking.", "auto")


def _denial(f: CallFacts) -> PolicyDecision | None:
    if f.grant is None:
        return PolicyDecision("deny", f"{f.tool} is not on this agent's allowlist.", "not_granted")
    if f.grant == "deny":
        return PolicyDecision("deny", f"This agent's grant for {f.tool} is deny.", "grant_deny")
    if f.grant not in ("auto", "approve"):
        return PolicyDecision("deny", f"Unknown grant policy {f.grant!r}.", "bad_grant")
    if f.state != "active":
        return PolicyDecision("deny", f"{f.tool} is {f.state}; no agent may call it until an admin reviews it.",
                              f"tool_{f.state}")
    if not f.pinned:
        return PolicyDecision("deny", f"The current definition of {f.tool} has not been approved (pinned) "
                                      "by an admin.", "not_pinned")
    if f.risk not in RISKS:
        return PolicyDecision("deny", f"{f.tool} has an unknown risk class {f.risk!r}.", "bad_risk")
    return None


def _human_required(f: CallFacts) -> list[tuple[str, str]]:
    """Holds no grant and no standing approval can lift."""
    holds = []
    if f.risk == "dangerous":
        holds.append(("dangerous", f"{f.tool} is dangerous: a person approves every call."))
    if f.risk == "write" and f.trust_tier not in ("official", "internal"):
        holds.append(("third_party_write", f"{f.tool} writes to a third-party server: a person approves every call."))
    if f.tainted and f.risk in WRITES:
        holds.append(("tainted", f"This run has read untrusted content{_source(f)}, so every write needs a person."))
    if f.tainted and f.open_world:
        holds.append(("tainted_open_world", f"This run has read untrusted content{_source(f)}, and {f.tool} reaches "
                                            "the open internet, so a person approves each call (its arguments could "
                                            "carry data out)."))
    if f.arguments is not None and f.risk in WRITES:
        came = f" (they appear in the result of {f.copied_source})" if f.copied_source else ""
        of = f" (of {f.copied_source})" if f.copied_source else ""
        if f.unrequested:
            holds.append(("unrequested_destination", f"The arguments send to {', '.join(f.unrequested[:5])}, which the "
                                                     f"run's request never mentions{came}, so a person confirms "
                                                     "where this goes."))
        if f.copied:
            holds.append(("copied_from_results", f"The arguments {', '.join(f.copied[:5])} carry text copied from a "
                                                 f"tool result{of} that the run's request does not hold, so a "
                                                 "person checks them."))
    return holds


def _source(f: CallFacts) -> str:
    return f" ({f.taint_source})" if f.taint_source else ""


def _grant_holds(f: CallFacts) -> list[tuple[str, str]]:
    holds = []
    if f.grant == "approve":
        holds.append(("grant_approve", f"This agent's grant for {f.tool} is approve: a person decides each call."))
    if f.condition and f.arguments is not None:
        try:
            matched = parse_condition(f.condition).evaluate(f.arguments)
        except ConditionError as exc:
            holds.append(("condition_error", f"The condition {f.condition.strip()!r} could not be checked "
                                             f"({exc}), so a person decides."))
        else:
            if matched:
                holds.append(("condition", f"The arguments match {f.condition.strip()!r}, so a person decides."))
    return holds


def grant_problem(*, tool: str, risk: str, state: str, trust_tier: str, policy: str) -> str | None:
    """Why a grant must not be saved, or None. The form shows this next to the grant."""
    if policy not in ("auto", "approve", "deny"):
        return "Choose auto, approve or deny."
    if state in ("quarantined", "removed", "disabled") and policy != "deny":
        return f"{tool} is {state}: it cannot be granted until an admin reviews it."
    if policy == "auto" and risk == "dangerous":
        return f"{tool} is dangerous, so it cannot be auto: choose approve or deny."
    if policy == "auto" and risk == "write" and trust_tier not in ("official", "internal"):
        return f"{tool} writes to a third-party server, so it cannot be auto: choose approve or deny."
    return None

"""The one source of the short explanations shown where things are chosen: trust tiers, risk
classes, grant policies and limits. Pages render them through `{% help_topic "<topic>" %}`
(apps/web/templatetags/help.py); docs/concepts.md repeats the same sentences (a test checks).
"""

from __future__ import annotations

from apps.registry.models import TRUST_TIER_HELP, TrustTier

TRUST_TIERS = [(tier.value, tier.label, TRUST_TIER_HELP[tier]) for tier in TrustTier]

RISKS = [
    ("read", "Read", "Only looks things up. Can be auto."),
    ("write", "Write", "Changes something. Auto only on official or internal servers; otherwise a person approves "
                       "each call."),
    ("dangerous", "Dangerous", "Hard to undo (deleting, paying, sending). A person approves every call, whatever "
                               "the grant says."),
]

POLICIES = [
    ("auto", "Auto", "Runs without asking, unless a rule that always needs a person applies (dangerous tools, "
                     "third-party writes, writes after untrusted content) or its condition matches the arguments."),
    ("approve", "Approve", "Waits in the inbox until a person approves or rejects that exact call."),
    ("deny", "Deny", "Never runs; the model is not offered the tool."),
]

AGENT_LIMITS = [
    ("max_steps", "Max steps per turn", "Model calls in one turn of this agent before it must stop."),
    ("budget", "Monthly budget", "Set under Costs, Budgets (admins): at 100 % the agent's new runs are refused "
                                 "and its running ones stop before their next model call."),
]

CREW_LIMITS = [
    ("max_hops", "Max hops", "Hand-offs between agents in one run (default 6)."),
    ("max_tool_calls", "Max tool calls", "Tool calls in one run. Repeating the same call with the same "
                                         "arguments also stops it."),
    ("timeout_s", "Timeout (seconds)", "Wall-clock time for the whole run."),
    ("token_budget", "Token budget", "Model tokens in one run; checked before each model call. Empty: no limit."),
    ("budget_usd", "Budget (USD)", "Spend for one run; checked before each model call. Empty: no limit."),
]

TOPICS = {
    "trust_tier": ("Trust tiers", TRUST_TIERS),
    "risk": ("Risk classes", RISKS),
    "policy": ("Policies", POLICIES),
    "agent_limits": ("Agent limits", AGENT_LIMITS),
    "crew_limits": ("Crew limits", CREW_LIMITS),
}


def explain(topic: str, key: str) -> str:
    """One line of a topic, e.g. explain("policy", "approve")."""
    return next((text for value, _, text in TOPICS[topic][1] if value == key), "")

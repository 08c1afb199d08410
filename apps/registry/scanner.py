"""Tool poisoning and injection scan: local, deterministic, no network. Used on tool definitions
(at sync) and on tool output (the run engine and the gateway, through scan_text).

Looks at every string of a definition a model may read: the description, the title, and the
descriptions, titles, enums, defaults and examples inside its schemas. Each rule yields a
finding with a severity; a high one quarantines the tool (services decide that).
"""

from __future__ import annotations

import base64
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from apps.registry.models import Severity

DESCRIPTION_LIMIT = 1000

# Text aimed at the model rather than describing the tool. Each pattern comes with the words one of which
# every match of it contains once lower-cased, when the text is ASCII (most tool output): a pattern is
# tried only where one of its words occurs. On 2 KB of text that holds none of them the 37 searches took
# ~0.9 ms, on every tool result of every run step; the word checks take ~0.02 ms. No words: the pattern
# cannot match ASCII text at all. Text with anything beyond ASCII gets every pattern (case folding is
# then wider than `str.lower`). tests/registry/test_scanner_prefilter.py checks each word list against
# strings generated from its pattern.
INSTRUCTION_RULES = [
    (r"\bignore\s+(all\s+|any\s+)?(the\s+)?(previous|prior|above|earlier|preceding|other)\b", ("ignore",)),
    (r"\bdisregard\s+(all\s+|any\s+)?(the\s+)?(previous|prior|above|earlier|your|other)\b", ("disregard",)),
    (r"\bforget\s+(all\s+|everything\s+|your\s+)?(previous|prior|instructions)", ("forget",)),
    (r"<\s*/?\s*(important|system|instructions?|secret|hidden)\s*>", ("important", "system", "instruction", "secret",
                                                                       "hidden")),
    (r"\[\s*(system|important|instructions?)\s*\]", ("system", "important", "instruction")),
    (r"\b(system\s+prompt|developer\s+message)\b", ("system", "developer")),
    (r"\bdo\s+not\s+(tell|inform|mention|reveal|show|notify|alert)\b.{0,40}\b(user|human|anyone)\b", ("not",)),
    (r"\b(without|don'?t)\s+(telling|informing|asking|notifying)\s+the\s+(user|human)\b",
     ("telling", "informing", "asking", "notifying")),
    (r"\bbefore\s+(using|calling|invoking|running)\s+(this|any|the)\b.{0,80}\b(call|invoke|run|read|use|send)\b",
     ("before",)),
    (r"\b(first|always)\s+(call|invoke|run|use)\s+(the\s+)?`?[\w.-]+`?\s+tool\b", ("tool",)),
    (r"\byou\s+(must|should|have\s+to|need\s+to)\s+(always\s+|first\s+)?(call|invoke|send|read|include|pass)\b",
     ("you",)),
    (r"\b(override|bypass|replace)\s+(the\s+)?(instructions|rules|policy|tool)\b", ("override", "bypass", "replace")),
    (r"\bas\s+an?\s+(ai|assistant|language\s+model)\b.{0,40}\b(must|should)\b", ("must", "should")),
    (r"\bthis\s+is\s+(very\s+)?important\b.{0,60}\b(must|otherwise)\b", ("important",)),
    # role overrides and chat-template tokens
    (r"(?m)^\s*(system|developer|assistant)\s*:", ("system", "developer", "assistant")),
    (r"<\|(im_start|im_end|system|begin_of_text|start_header_id|end_header_id|eot_id)\|>|\[/?INST\]|<<\s*/?SYS\s*>>",
     ("<|", "inst]", "sys")),
    (r"\byou\s+are\s+now\s+(an?\s+)?(unrestricted|jailbroken|dan\b|in\s+\w+\s+mode|the\s+(system|admin))", ("you",)),
    (r"\b(new|updated|additional)\s+(system\s+)?instructions?\s*(:|\n|follow)", ("instruction",)),
    (r"\bfrom\s+now\s+on\b.{0,60}\b(always|never|approve|ignore|call|you\s+(must|will|should))\b", ("from",)),
    # a tool call written out for the model to make (the scripted model's obey format, and prose)
    (r"(?m)^\s*CALL\s+[\w-]+\.[\w-]+\s*\{", ("call",)),
    (r"\b(call|invoke|run|use)\s+(the\s+)?`?[\w.-]+`?\s+tool\s+(with|for|on|now)\b", ("tool",)),
    # other languages: ignore previous instructions / do not tell the user / call the tool
    (r"\bignor(a|ar|e|ez|iere|ieren)\s+(todas\s+|toutes\s+|alle\s+)?(las\s+|les\s+)?"
     r"(instrucciones|instructions|vorherigen|bisherigen|anweisungen)", ("ignor",)),
    (r"\bno\s+(le\s+)?(digas|digan|informes|menciones)\s+(nada\s+)?(al|a\s+el)\s+usuario", ("usuario",)),
    (r"\b(llama|usa|ejecuta|invoca)\s+(a\s+)?la\s+herramienta\b", ("herramienta",)),
    (r"\bne\s+(dis|dites)\s+rien\s+(à|a)\s+l'utilisateur", ("utilisateur",)),
    (r"игнорир\w*\s+(все\s+)?(предыдущ|прошл)\w*\s+(инструкц|указан|команд)", ()),
    (r"не\s+(говори|сообщай|рассказывай)\w*\s+пользовател", ()),
    (r"(忽略|无视|忽视)(之前|以上|先前|前面|上述)?的?(所有|全部)?(指令|指示|说明|规则)", ()),
    (r"系统提示|不要告诉用户|调用.{0,30}工具", ()),
    (r"(以前|前|上記)の(指示|命令)を(すべて|全て)?無視", ()),
]
INSTRUCTION_PATTERNS = [pattern for pattern, _ in INSTRUCTION_RULES]
# Comments a reader never sees, holding words aimed at a model.
HIDDEN_COMMENT = re.compile(r"(<!--.*?-->|\[//\]:\s*#\s*\(.*?\))", re.DOTALL)
COMMENT_IMPERATIVE = re.compile(r"\b(assistant|system|ignore|instruction|call|invoke|must|do\s+not)\b", re.I)
# Long base64 runs: decoded and scanned again (an instruction a reader cannot see at a glance).
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{24,}={0,2}")
SECRET_ACCESS = re.compile(
    r"\b(read|cat|open|print|send|include|contents?|upload|paste|copy|show|dump|leak|pass|attach|forward)\b",
    re.IGNORECASE)
SECRET_RULES = [  # (pattern, words) as for INSTRUCTION_RULES
    (r"~/\.ssh\b", (".ssh",)), (r"\bid_(rsa|ed25519|ecdsa|dsa)\b", ("id_",)), (r"(?<![\w/.-])\.env\b", (".env",)),
    (r"\.aws/credentials\b", (".aws/credentials",)), (r"\bcredentials?\s*(file|\.json)\b", ("credential",)),
    (r"/etc/(passwd|shadow)\b", ("/etc/",)), (r"\.netrc\b", (".netrc",)),
    (r"\.git-credentials\b", (".git-credentials",)), (r"\b(private|secret)\s+key\b", ("key",)),
    (r"\b(api[_\s-]?keys?|access[_\s-]?tokens?)\s+(from|in|of)\b", ("api", "access")),
    (r"\bmcp\.json\b", ("mcp.json",)),
]
SECRET_PATTERNS = [pattern for pattern, _ in SECRET_RULES]
URL_RE = re.compile(r"\b(?:https?|ftp|wss?)://[^\s\"'<>)]+", re.IGNORECASE)
EXFIL_HINTS = re.compile(
    r"(\{[^}]*\}|\?\S*=|webhook|ngrok|requestbin|pipedream|pastebin|burpcollaborator|interact\.sh|exfil)",
    re.IGNORECASE,
)
SEND_TO_URL = re.compile(r"\b(send|post|upload|forward|submit|report)\b.{0,80}\b(https?://)", re.IGNORECASE)
HIDDEN_CHARS = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u00ad\U000e0000-\U000e007f]")
# Parameter parts that should never carry prose instructions.
VALUE_KEYS = ("enum", "default", "const", "examples")

_INSTRUCTION_RES = [(re.compile(p, re.IGNORECASE | re.DOTALL), words) for p, words in INSTRUCTION_RULES]
_SECRET_RES = [(re.compile(p, re.IGNORECASE), words) for p, words in SECRET_RULES]


def _candidates(rules: list[tuple[re.Pattern[str], tuple[str, ...]]], text: str) -> Iterator[re.Pattern[str]]:
    """The rules' patterns that may match `text`, in order (see INSTRUCTION_RULES)."""
    if not text.isascii():
        yield from (regex for regex, _ in rules)
        return
    folded = text.lower()
    yield from (regex for regex, words in rules if any(word in folded for word in words))


def _search(rules: list[tuple[re.Pattern[str], tuple[str, ...]]], text: str) -> re.Match[str] | None:
    return next((m for regex in _candidates(rules, text) if (m := regex.search(text))), None)


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    where: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def scan_definition(definition: dict[str, Any], *, limit: int = DESCRIPTION_LIMIT) -> list[dict[str, str]]:
    """All findings for one canonical definition (see definitions.canonical_definition)."""
    findings: list[Finding] = []
    description = definition.get("description") or ""
    if len(description) > limit:
        findings.append(Finding("too_long", Severity.MEDIUM, "description",
                                f"The description is {len(description)} characters long (limit {limit}); "
                                "long descriptions can hide instructions."))
    for where, text, is_value in _texts(definition):
        findings.extend(scan_text(text, where=where, is_value=is_value))
    unique = {(f.code, f.where): f for f in findings}
    return [f.as_dict() for f in unique.values()]


def scan_text(text: str, *, where: str, is_value: bool = False) -> list[Finding]:
    """Findings in one string. `is_value`: an enum/default/example, where any prose is suspect."""
    found: list[Finding] = []
    # ASCII (most tool output) has no invisible characters and nothing NFKC changes: the walks over every
    # character are for other text only. Likewise the comment and URL patterns run only where their marks are.
    ascii = text.isascii()
    hidden = [] if ascii else (HIDDEN_CHARS.findall(text) or
                               [c for c in text if unicodedata.category(c) in ("Cf", "Co")])
    if hidden:
        names = sorted({f"U+{ord(c):04X}" for c in hidden})
        found.append(Finding("hidden_unicode", Severity.HIGH, where,
                             f"Invisible characters ({', '.join(names[:5])}) can hide text from people."))
    # full-width letters read as ASCII
    visible = text if ascii else unicodedata.normalize("NFKC", HIDDEN_CHARS.sub("", text))
    if _search(_INSTRUCTION_RES, visible):
        found.append(Finding("model_instruction", Severity.HIGH, where,
                             "Contains instructions aimed at the model rather than a description of the tool."))
    if ("<!--" in visible or "[//]" in visible) and any(COMMENT_IMPERATIVE.search(c)
                                                        for c in HIDDEN_COMMENT.findall(visible)):
        found.append(Finding("hidden_comment", Severity.HIGH, where,
                             "A comment that a person reading the text would not see holds words aimed at the model."))
    if _encoded_instruction(visible):
        found.append(Finding("encoded_instruction", Severity.HIGH, where,
                             "Base64-encoded text that decodes to instructions aimed at the model."))
    secret = _search(_SECRET_RES, visible)
    if secret is not None:
        near = visible[max(0, secret.start() - 80):secret.end() + 80]
        severity = Severity.HIGH if SECRET_ACCESS.search(near) else Severity.MEDIUM
        found.append(Finding("secret_path", severity, where,
                             "Refers to secrets or credential files (keys, .env, ~/.ssh, credentials)."))
    found.extend(_url_findings(visible, where))
    if is_value and len(visible) > 80 and len(visible.split()) > 10:
        found.append(Finding("prose_in_value", Severity.MEDIUM, where,
                             "A parameter value (enum/default/example) holds prose; values should be data."))
    return found


def _encoded_instruction(text: str) -> bool:
    for run in BASE64_RUN.findall(text)[:20]:
        try:
            decoded = base64.b64decode(run + "=" * (-len(run) % 4), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            continue
        readable = all(c.isprintable() or c.isspace() for c in decoded)
        if readable and (_search(_INSTRUCTION_RES, decoded) or _search(_SECRET_RES, decoded)):
            return True
    return False


def _url_findings(text: str, where: str) -> list[Finding]:
    urls = URL_RE.findall(text) if "://" in text else []
    if not urls:
        return []
    if SEND_TO_URL.search(text) or any(EXFIL_HINTS.search(u) for u in urls):
        return [Finding("exfiltration_url", Severity.HIGH, where,
                        f"A URL that data could be sent to: {urls[0][:100]}")]
    return [Finding("url", Severity.LOW, where, f"Mentions a URL: {urls[0][:100]}")]


def _texts(definition: dict[str, Any]) -> Iterator[tuple[str, str, bool]]:
    for key in ("description", "title"):
        if definition.get(key):
            yield key, definition[key], False
    for key in ("input_schema", "output_schema"):
        yield from _schema_texts(definition.get(key), key)


def _schema_texts(node: Any, path: str) -> Iterator[tuple[str, str, bool]]:
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            if key in ("description", "title") and isinstance(value, str):
                yield here, value, False
            elif key in VALUE_KEYS and not path.endswith(".properties"):
                for i, item in enumerate(value if isinstance(value, list) else [value]):
                    if isinstance(item, str):
                        yield f"{here}[{i}]" if isinstance(value, list) else here, item, True
            else:
                yield from _schema_texts(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _schema_texts(item, f"{path}[{i}]")

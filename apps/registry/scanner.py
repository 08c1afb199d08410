"""Tool poisoning and injection scan: local, deterministic, no network. Used on tool definitions
(at sync) and on tool output (the run engine and the gateway, through scan_text).

Looks at every string of a definition a model may read: the description, the title, and the
descriptions, titles, enums, defaults and examples inside its schemas. Each rule yields a
finding with a severity; a high one quarantines the tool (services decide that).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import ahocorasick

from apps.registry.definitions import claims_read_only_but_acts
from apps.registry.disguises import HIDDEN_CHARS, views
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
INSTRUCTION_RULES += [
    (r"\b(ignore|disregard|forget|override|bypass|skip|abandon)\s+(all\s+|any\s+|every\s+|the\s+|your\s+|my\s+|"
     r"these\s+|those\s+|previous\s+|prior\s+|above\s+|earlier\s+|preceding\s+|original\s+|existing\s+|"
     r"current\s+|other\s+|system\s+|safety\s+)*(instructions?|rules|guidelines|directions|directives|prompts?|"
     r"guardrails|restrictions|constraints|policies)\b",
     ("ignore", "disregard", "forget", "override", "bypass", "skip", "abandon")),
    (r"\b(assistant|ai|agent|model|llm|chatbot|bot|claude|gpt|copilot)\s*[,:!-]\s*(please\s+)?(you\s+(must|should|"
     r"need|will)|ignore|send|forward|call|run|execute|transfer|delete|email|upload|do\s+not|don'?t|immediately)\b",
     ("assistant", "ai", "agent", "model", "llm", "bot", "claude", "gpt", "copilot")),
    (r"\b(dear|attention|hey|hello|hi|note\s+to|message\s+to|instructions?\s+for|memo\s+to)\s+(the\s+|all\s+|any\s+)?"
     r"(ai|assistants?|agents?|models?|llms?|bots?|chatbots?|language\s+models?)\b",
     ("dear", "attention", "hey", "hello", "hi", "note", "message", "instruction", "memo")),
    (r"\bif\s+you\s+are\s+(an?\s+)?(ai|assistant|agent|llm|language\s+model|bot|chatbot|automated)\b", ("you",)),
    (r"\byour\s+(new|real|actual|true|updated|primary|only|next|first)\s+(task|goal|objective|instructions?|mission|"
     r"job|purpose|priority)\b", ("your",)),
    (r"\b(do\s+not|don'?t|no\s+need\s+to|never)\s+(ask|wait)\s+(for\s+|the\s+user\s+(for\s+)?)?(confirmation|approval|"
     r"permission|consent)", ("ask", "wait")),
    # a model addressed by name, or told what to do before (or instead of) the task it was given
    (r"\bto\s+you\s*,?\s+(gpt|chatgpt|claude|gemini|llama|mistral|copilot|the\s+(ai|assistant|agent|model|llm))\b",
     ("you",)),
    (r"\bbefore\s+you\s+(can\s+|start\s+|begin\s+|continue\s+|proceed\s+(with\s+)?|go\s+on\s+(with\s+)?)?"
     r"(solve|do|complete|finish|answer|handle|work\s+on|start|begin|continue|proceed\s+with)?\s*(the|your|this|my|that)"
     r"\s+(original\s+|actual\s+|main\s+|current\s+)?(task|request|question|assignment|job)\b", ("before",)),
    (r"\b(the|your)\s+(original\s+)?(task|request|question|assignment)\s+(that\s+|which\s+)?(i|we|the\s+user)\s+"
     r"(gave|assigned|asked|set|sent)\s+(to\s+)?you\b", ("task", "request", "question", "assignment")),
    (r"<\s*/?\s*(information|instruction|admin|assistant|tool_?call|context_?override)\s*>",
     ("information", "instruction", "admin", "assistant", "tool", "context")),
]
# Text addressed to an AI reader: a label or greeting for it ("note for the assistant", "hey chatbot"), or it
# told what it should, must or may do ("automated agents reading this should ..."), in the languages the
# tests cover. A person writing to a person has no reason to single out the AI that may read along, so this
# holds whatever the ask is. Bare "agent" and "model" count only after a label or a greeting: support agents
# and product models are people's words too.
_AI = (r"(?:a\.?i|assistants?|chat\s?bots?|bots?|llms?|language\s+models?|copilot|gpt|claude|gemini|"
       r"(?:ai|automated|autonomous|virtual|digital|machine)[\s-]+(?:models?|agents?|systems?|assistants?|helpers?|"
       r"handlers?|handling|processors?|processing|readers?))")
_AI_OR_ROLE = rf"(?:{_AI}|models?|agents?)"
INSTRUCTION_RULES += [
    (r"\b(?:notes?|tips?|hints?|nb|n\.b\.|p\.?s\.?|fyi|heads[- ]up|reminders?|messages?|memos?|instructions?|guidance|"
     r"directions?|directives?|notices?|comments?|requests?|tasks?|important|attention|warning|requirements?|"
     r"intended|meant|written|reserved)\s*\(?\s*(?:only\s+)?(?:for|to)\s+(?:the\s+|all\s+|any\s+|every\s+|each\s+|"
     rf"whichever\s+|whatever\s+|an?\s+)?(?:[\w-]+\s+){{0,2}}?{_AI_OR_ROLE}\b",
     ("note", "tip", "hint", "nb", "n.b.", "ps", "p.s", "fyi", "heads", "reminder", "message", "memo", "instruction",
      "guidance", "direction", "directive", "notice", "comment", "request", "task", "important", "attention",
      "warning", "requirement", "intended", "meant", "written", "reserved")),
    (r"\b(?:dear|hey|hello|greetings|attention|psst)\s*,?\s+(?:the\s+|all\s+|any\s+|my\s+|dear\s+)?"
     rf"(?:[\w-]+\s+)?{_AI}\b", ("dear", "hey", "hello", "greetings", "attention", "psst")),
    (rf"\b{_AI}\s+(?:[\w,-]+\s+){{0,4}}?(?:should|must|shall|"
     r"needs?\s+to|ha(?:s|ve)\s+to|is\s+to|are\s+to|(?:is|are)\s+(?:hereby\s+|now\s+)?(?:instructed|required|"
     r"authori[sz]ed|allowed|permitted|cleared|expected|asked|told))\b",
     ("should", "must", "shall", "need", "has to", "have to", "is to", "are to", "instructed", "required", "authori",
      "allowed", "permitted", "cleared", "expected", "asked", "told")),
    (rf"\byou\s*,\s*(?:the|an?|our|my)\s+(?:[\w-]+\s+)?{_AI_OR_ROLE}\b", ("you",)),
    (rf"\b(?:whichever|whatever)\s+(?:[\w-]+\s+)?{_AI_OR_ROLE}\s+(?:that\s+|who\s+)?(?:picks|"
     r"reads|reading|processes|processing|sees|handles|handling|is\s+reading|summari[sz]es|summari[sz]ing)\b",
     ("whichever", "whatever")),
    (r"\byou\s+(?:will|would)\s+(?:only\s+)?be\s+(?:rated|scored|rewarded|evaluated|penali[sz]ed|judged|graded|"
     r"considered\s+helpful)\b", ("you",)),
    (r"\byou\s+(?:have\s+been|are\s+now|were)\s+(?:upgraded|switched|promoted|granted|moved|put)\b.{0,40}\b(?:mode|"
     r"access|autonomy|permissions?|privileges?)\b", ("you",)),
    (r"\b(?:hinweis|hinweise|anweisung(?:en)?|nachricht|notiz|info|achtung)\s+(?:f(?:ü|ue|u)r|an)\s+(?:den\s+|die\s+|"
     r"das\s+|alle\s+)?(?:ki|ki-\w+|assistent\w*|bot|chatbot|sprachmodell\w*)\b",
     ("hinweis", "anweisung", "nachricht", "notiz", "info", "achtung")),
    (r"\b(?:message|note|consignes?|instructions?|remarque|rappel|avis|attention)\s+(?:pour|à|a)\s+(?:l['\u2019]\s*|le\s+|"
     r"la\s+|les\s+)?(?:assistant\w*|ia|agent\w*|bot|chatbot|mod[èe]le\w*)\b",
     ("message", "note", "consigne", "instruction", "remarque", "rappel", "avis", "attention")),
    (r"\b(?:nota|mensaje|instrucci(?:o|ó)n(?:es)?|aviso|indicaci(?:o|ó)n(?:es)?|atenci(?:o|ó)n)\s+(?:para|al?|a\s+la)\s+"
     r"(?:el\s+|la\s+|los\s+)?(?:asistente|ia|agente|bot|chatbot|modelo)s?\b",
     ("nota", "mensaje", "instrucci", "aviso", "indicaci", "atenci")),
    (r"\b(?:nota|messaggio|istruzioni|avviso|indicazioni|attenzione)\s+(?:per|all['\u2019]|al|alla)\s*(?:l['\u2019]\s*|il\s+|"
     r"lo\s+|la\s+)?(?:assistente|ia|agente|bot|chatbot|modello)\b",
     ("nota", "messaggio", "istruzioni", "avviso", "indicazioni", "attenzione")),
    (r"\b(?:nota|mensagem|instru(?:ç|c)(?:õ|o)es|aviso|aten(?:ç|c)(?:ã|a)o)\s+(?:para|ao|à|a)\s+(?:o\s+|a\s+)?"
     r"(?:assistente|ia|agente|bot|chatbot|modelo)\b", ("nota", "mensagem", "instru", "aviso", "aten")),
    (r"\b(?:opmerking|bericht|instructies?|notitie|let\s+op|aanwijzing(?:en)?)\s+(?:voor|aan)\s+(?:de\s+|het\s+)?"
     r"(?:ai-?assistent|assistent|ai|agent|bot|chatbot|model)\b",
     ("opmerking", "bericht", "instructie", "notitie", "let op", "aanwijzing")),
    (r"(?:AI|アシスタント|エージェント|ボット|チャットボット|モデル)(?:への|へ|に対する)(?:指示|お願い|メッセージ|注意|連絡)?[:、]",
     ()),
    (r"(?:致|给|給|对|對)\s*(?:AI|人工智能)?\s*(?:助手|智能体|机器人|機器人|模型|AI|人工智能)(?:的)?(?:说明|說明|指示|消息|提示|注意)?"
     r"[:,]", ()),
    (r"(?:для|к)\s+(?:ии|ии-\w+|ассистент\w*|бот\w*|модел\w*|агент\w*|нейросет\w*)\s*[:,]", ()),
]
INSTRUCTION_PATTERNS = [pattern for pattern, _ in INSTRUCTION_RULES]
# A claim of authority the text does not have: approval or orders from the user, an admin, the system.
AUTHORITY_RULES = [
    (r"\b(pre-?approved|pre-?authori[sz]ed|already\s+(been\s+)?(approved|authori[sz]ed|confirmed)\s+by)\b",
     ("approved", "authori", "confirmed")),
    (r"\b(authori[sz]ed|approved|requested|instructed|ordered|sanctioned)\s+by\s+(the\s+|your\s+)?(user|admin\w*|"
     r"owner|operator|developer|system|security\s+team)\b",
     ("authori", "approved", "requested", "instructed", "ordered", "sanctioned")),
    (r"\b(message|instructions?|orders?|directive|command)\s+from\s+(the\s+|your\s+)?(user|admin\w*|owner|operator|"
     r"developer|system|security\s+team)\b", ("from",)),
    (r"\b(system|admin(istrator)?|security|developer|root)\s+(override|instructions?|command|directive)s?\b",
     ("system", "admin", "security", "developer", "root")),
    (r"\bthe\s+(user|admin\w*|owner|operator)\s+(has\s+|have\s+)?(already\s+)?(asked|wants|requested|instructed|"
     r"authori[sz]ed|approved|told)\s+(you|the\s+assistant|the\s+agent)\b", ("user", "admin", "owner", "operator")),
    (r"\bon\s+behalf\s+of\s+(the\s+)?(user|admin\w*|owner)\b", ("behalf",)),
    (r"\b(ya\s+)?(aprobado|autorizado)\s+por\s+(el\s+)?(usuario|administrador)", ("aprobado", "autorizado")),
    (r"\b(d[ée]j[àa]\s+)?(approuv|autoris)[ée]e?s?\s+par\s+(l'|le\s+)?(utilisateur|administrateur)",
     ("approuv", "autoris")),
    (r"\b(genehmigt|freigegeben|autorisiert)\s+(vom|von|durch\s+den)\s+(benutzer|nutzer|administrator|admin)",
     ("genehmigt", "freigegeben", "autorisiert")),
    (r"(用户|管理员|系统)已(经)?(批准|授权|同意)|预先批准|已获批准", ()),
    (r"(пользователь|администратор)\s+(уже\s+)?(одобрил|разрешил|подтвердил)|предварительно\s+одобрен", ()),
]
# A claim that the person's part is not needed: no approval, no one to ask, the review skipped.
AUTHORITY_RULES += [
    (r"\b(?:no|without)\s+(?:any\s+)?(?:human\s+|manual\s+|further\s+)?(?:approvals?|confirmations?|sign-?offs?|"
     r"reviews?|permissions?)\s+(?:is\s+|are\s+)?(?:required|needed|necessary)\b",
     ("approval", "confirmation", "sign", "review", "permission")),
    (r"\b(?:without|no\s+need\s+(?:for|to)|don'?t\s+need\s+to|do\s+not\s+need\s+to|never)\s+(?:waiting\s+for|"
     r"wait(?:ing)?\s+for|asking|ask|checking\s+with|check\s+with|involving|involve)\s+(?:for\s+)?(?:a\s+|the\s+|any\s+)?"
     r"(?:human|person|people|anyone|user|manager|approver|approval|confirmation|sign-?off|permission)\b",
     ("wait", "ask", "check", "involv")),
    (r"\b(?:skip|bypass|ignore|disable|turn\s+off)\s+(?:the\s+|all\s+|any\s+)?(?:usual\s+|normal\s+|standard\s+|"
     r"required\s+)?(?:approvals?|approval\s+steps?|confirmations?|sign-?offs?|human\s+review|review\s+steps?|"
     r"safety\s+checks?)\b", ("skip", "bypass", "ignore", "disable", "turn")),
    (r"\b(?:no\s+longer|don'?t|do\s+not)\s+(?:need|require)s?\s+(?:a\s+|any\s+)?(?:sign-?off|approval|confirmation|"
     r"human|permission)", ("need", "require")),
    (r"\b(?:message|notice|instructions?|update)\s+from\s+(?:anthropic|openai|google|deepmind|microsoft|the\s+(?:ai|"
     r"model)\s+(?:provider|vendor|developers?))\b", ("from",)),
    (r"\b(?:new|updated|urgent|additional|next|real)\s+task\s+from\s+(?:the\s+)?(?:operator|admin\w*|user|system|"
     r"developer|owner)\b", ("task",)),
    (r"\bsans\s+(?:demander|attendre)\s+(?:de\s+|la\s+|une\s+|d['\u2019]\s*)?(?:confirmation|validation|autorisation|"
     r"approbation)", ("sans",)),
    (r"\bsin\s+(?:pedir|esperar|solicitar)\s+(?:la\s+|una\s+)?(?:confirmaci(?:o|ó)n|aprobaci(?:o|ó)n|autorizaci(?:o|ó)n)",
     ("sin pedir", "sin esperar", "sin solicitar")),
    (r"\bsenza\s+(?:chiedere|attendere|aspettare)\s+(?:la\s+|una\s+)?(?:conferma|approvazione|autorizzazione)",
     ("senza",)),
    (r"\bohne\s+(?:r(?:ü|ue|u)ckfrage|best(?:ä|ae|a)tigung|freigabe|genehmigung)", ("ohne",)),
    (r"\bsem\s+(?:pedir|esperar)\s+(?:a\s+|uma\s+)?(?:confirma(?:ç|c)(?:ã|a)o|aprova(?:ç|c)(?:ã|a)o)",
     ("sem pedir", "sem esperar")),
    (r"без\s+(?:подтвержден|одобрен|согласован)\w*", ()),
]
# Asks to send data somewhere, add a hidden recipient, or put secrets where they leave.
EXFILTRATION_RULES = [
    (r"\b(send|forward|e-?mail|mail|upload|post|transfer|share|copy|submit|sync|paste|dump|export)\s+(me\s+|us\s+)?"
     r"(all|every|each|the|a\s+copy\s+of|copies\s+of|your|this|these|any|full|entire)\b.{0,60}?\b(data|contents?|"
     r"conversations?|chats?|history|messages?|emails?|inbox|files?|documents?|records?|logs?|credentials?|passwords?|"
     r"secrets?|keys?|tokens?|contacts?|transcripts?|database|attachments?|customers?|details)\b.{0,80}?"
     r"(\b(to|into|at)\s+[\w.+-]+@[\w-]+\.[\w.-]+|\b(to|into|at)\s+(https?|ftp)://|@[\w-]+\.[a-z]{2,})",
     ("send", "forward", "mail", "upload", "post", "transfer", "share", "copy", "submit", "sync", "paste", "dump",
      "export")),
    (r"\b(add|include|put|always|also|secretly|silently|quietly)\b.{0,40}\bb?cc\b", ("add", "include", "put", "always",
                                                                                     "also", "secretly", "silently",
                                                                                     "quietly")),
    (r"\b(append|attach|include|add|embed|insert|put|paste|encode)\s+(the\s+|your\s+|all\s+|any\s+|its\s+|my\s+)?"
     r"(\w+\s+){0,2}?(api[\s_-]?keys?|secret\s+keys?|secrets|access\s+tokens?|tokens|passwords?|credentials|"
     r"private\s+keys?|ssh\s+keys?|session\s+cookies?|env(ironment)?\s+variables|system\s+prompt)\b",
     ("append", "attach", "include", "add", "embed", "insert", "put", "paste", "encode")),
    (r"\bexfiltrat", ("exfiltrat",)),
    (r"\b(secretly|silently|quietly|covertly|discreetly)\s+(send|forward|copy|email|upload|transfer|add|include|bcc|cc|"
     r"call|run|delete|share)\b", ("secretly", "silently", "quietly", "covertly", "discreetly")),
    (r"\b(hidden|secret|silent|invisible|blind)\s+(copy|cc|bcc|duplicate)\b", ("hidden", "secret", "silent",
                                                                              "invisible", "blind")),
    (r"\b(env[ií]a|reenv[ií]a|manda|transfiere|sube|comparte)\b.{0,60}\b(a|al)\s+[\w.+-]+@",
     ("env", "reenv", "manda", "transfiere", "sube", "comparte")),
    (r"\b(envoie[zs]?|envoyez|transf[eè]re[zr]?|transmet[sz]?|transmettez|partage[zr]?)\b.{0,60}\b(à|a)\s+[\w.+-]+@",
     ("envo", "transf", "transm", "partage")),
    (r"\b(sende|senden|schicke|schicken|leite|leiten|[üu]e?bertrage)\b.{0,60}\b(an|zu)\s+[\w.+-]+@",
     ("send", "schick", "leite", "bertrage")),
    (r"(发送|转发|上传|发给).{0,40}@|(отправ|перешл|пересл)\w*.{0,60}@|(送信|転送)して.{0,40}@", ()),
    # a sentence that orders something sent, moved or shared to a destination it names (an email address, an
    # IBAN-like account, a web address): the whole ask is in it, whoever it is addressed to
    (r"(?:^|[.!?:;]\s+|\n)\s*(?:please\s+|now\s+|then\s+|also\s+|immediately\s+)?(send|transfer|wire|forward|e-?mail|"
     r"post|upload|share|invite|concatenate|copy|move)\b[^.!?\n]{0,200}?([\w.+-]+@[\w-]+\.[\w.-]+|"
     r"\b[a-z]{2}\d{2}[a-z0-9]{10,30}\b|\bwww\.[\w-]+\.|\bhttps?://)",
     ("send", "transfer", "wire", "forward", "mail", "post", "upload", "share", "invite", "concatenate", "copy",
      "move")),
]
# Demands that the model use a tool (or move money, delete data) the task never asked for.
TOOL_DEMAND_RULES = [
    (r"\b(call|invoke|execute|run|use|trigger)\s+(the\s+)?`?[a-z]+_[a-z0-9_]+`?(\s+(tool|function))?\s*(\(|with\b|now\b|"
     r"immediately\b|using\b|for\s+(all|every|each)\b)", ("call", "invoke", "execute", "run", "use", "trigger")),
    (r"\b(transfer|wire|send)\s+.{0,40}\bto\s+(the\s+|this\s+|my\s+)?(account|iban|wallet|bitcoin|btc|crypto)\b",
     ("transfer", "wire", "send")),
    (r"\b(transfer|wire|send|refund|pay\s+out)\s+(all|every|the\s+(full|entire|remaining))\s+(\w+\s+)?(money|funds|"
     r"balance|orders?|amounts?|payments?)\b", ("transfer", "wire", "send", "refund", "pay")),
    (r"\b(delete|wipe|erase|destroy|drop)\s+(all|every|the\s+entire|each)\s+(\w+\s+)?(customers?|users?|records?|"
     r"orders?|accounts?|emails?|repos?|repositories|tables?|database|backups?)\b",
     ("delete", "wipe", "erase", "destroy", "drop")),
    (r"\b(reembolsa|transfiere|borra|elimina)\s+(todos|todas|todo)\b|\b(rembourse[zr]?|supprime[zr]?|vire[zr]?)\s+"
     r"(tout|toutes|tous)\b|\b(erstatte|l[öo]sche|[üu]berweise)\s+(alles|alle)\b",
     ("reembolsa", "transfiere", "borra", "elimina", "rembourse", "supprime", "vire", "erstatte", "losche",
      "berweise")),
]
# (code, severity, message, rules): each group's first match in any view of the text is one finding.
RULE_GROUPS = [
    ("model_instruction", Severity.HIGH,
     "Contains instructions aimed at the model rather than a description of the tool.", INSTRUCTION_RULES),
    ("authority_claim", Severity.MEDIUM, "Claims an authority it cannot have (pre-approved, from the user, admin "
                                         "or system).", AUTHORITY_RULES),
    ("exfiltration_ask", Severity.HIGH, "Asks to send data somewhere, add a hidden recipient or include secrets.",
     EXFILTRATION_RULES),
    ("tool_demand", Severity.HIGH, "Demands a tool call, a money movement or a deletion.", TOOL_DEMAND_RULES),
]
# Comments a reader never sees, holding words aimed at a model.
HIDDEN_COMMENT = re.compile(r"(<!--.*?-->|\[//\]:\s*#\s*\(.*?\))", re.DOTALL)
COMMENT_IMPERATIVE = re.compile(r"\b(assistant|system|ignore|instruction|call|invoke|must|do\s+not)\b", re.I)
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
EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+")
URL_RE = re.compile(r"\b(?:https?|ftp|wss?)://[^\s\"'<>)]+", re.IGNORECASE)
EXFIL_HINTS = re.compile(
    r"(\{[^}]*\}|\?\S*=|webhook|ngrok|requestbin|pipedream|pastebin|burpcollaborator|interact\.sh|exfil)",
    re.IGNORECASE,
)
SEND_TO_URL = re.compile(r"\b(send|post|upload|forward|submit|report)\b.{0,80}\b(https?://)", re.IGNORECASE)
# Parameter parts that should never carry prose instructions.
VALUE_KEYS = ("enum", "default", "const", "examples")

_INSTRUCTION_RES = [(re.compile(p, re.IGNORECASE | re.DOTALL), words) for p, words in INSTRUCTION_RULES]
_GROUP_RES = [(code, severity, message, [(re.compile(p, re.IGNORECASE | re.DOTALL), words) for p, words in rules])
              for code, severity, message, rules in RULE_GROUPS]
_ALL_WORDS = tuple(sorted({w for _, _, _, rules in RULE_GROUPS for _, words in rules for w in words}
                          | {w for _, words in SECRET_RULES for w in words}))
_SECRET_RES = [(re.compile(p, re.IGNORECASE), words) for p, words in SECRET_RULES]


def _candidates(rules: list[tuple[re.Pattern[str], tuple[str, ...]]], text: str,
                present: frozenset[str] | None = None) -> Iterator[re.Pattern[str]]:
    """The rules' patterns that may match `text`, in order (see INSTRUCTION_RULES). `present`: the rule words
    found in `text` (`_present_words`), when the caller tries several rule lists on the same text.

    Text beyond ASCII is prefiltered on its case-folded form, and the patterns without words (other scripts)
    always run. A match whose letters fold to something else than the word (a dotted capital I folds to
    "i" plus a combining dot) is skipped in that view and found in the Latin-skeleton view, which
    `disguises.views` adds for any such text and which drops the combining marks."""
    if present is None:
        present = _present_words(text)
    ascii = text.isascii()
    yield from (regex for regex, words in rules if (not words and not ascii) or not present.isdisjoint(words))


def _words_automaton(words: tuple[str, ...]) -> ahocorasick.Automaton:
    automaton = ahocorasick.Automaton()
    for word in words:
        automaton.add_word(word, word)
    automaton.make_automaton()
    return automaton


_WORDS = _words_automaton(_ALL_WORDS)


def _present_words(text: str) -> frozenset[str]:
    """Which of all the rules' words occur in a text (lower-cased, or case-folded beyond ASCII), overlapping ones
    too: one Aho-Corasick pass over the text for all ~250 words. Looking for each word in turn
    (`_present_words_plain`, its twin, which the tests hold it to) took ~0.23 ms on a 2 KB tool result, the
    pass ~0.03 ms."""
    return frozenset(word for _end, word in _WORDS.iter(_prefilter_form(text)))


def _present_words_plain(text: str) -> frozenset[str]:
    folded = _prefilter_form(text)
    return frozenset(filter(folded.__contains__, _ALL_WORDS))


def _prefilter_form(text: str) -> str:
    folded = text.lower() if text.isascii() else text.casefold()
    # A pattern's `\s+` matches any run of white space (tabs, new lines, control spaces), so a two-word rule
    # word ("sin pedir") is looked for in the text with each run made one space.
    return " ".join(folded.split())  # str.split's white space is re's \s: both are str.isspace


def _search(rules: list[tuple[re.Pattern[str], tuple[str, ...]]], text: str,
            present: frozenset[str] | None = None) -> re.Match[str] | None:
    return next((m for regex in _candidates(rules, text, present) if (m := regex.search(text))), None)


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
        findings.extend(_hiding_findings(text, where=where, limit=limit))
    if claims_read_only_but_acts(name=definition.get("name", ""), annotations=definition.get("annotations")):
        findings.append(Finding("annotation_contradiction", Severity.MEDIUM, "annotations",
                                f"Claims to be read-only (readOnlyHint) but its name, {definition.get('name')!r}, says "
                                "it acts: the claim is not believed and the tool keeps the write risk."))
    unique = {(f.code, f.where): f for f in findings}
    return [f.as_dict() for f in unique.values()]


def scan_resource(definition: dict[str, Any]) -> list[dict[str, str]]:
    """All findings for one resource's canonical definition (definitions.canonical_resource): its description
    and title as a tool's are scanned, and its name too (a resource's name is free text, a tool's is not)."""
    findings = scan_definition(definition)
    name = definition.get("name") or ""
    if name:
        found = [*scan_text(name, where="name"), *_hiding_findings(name, where="name", limit=DESCRIPTION_LIMIT)]
        findings += [f.as_dict() for f in found]
    return findings


def scan_server(*, instructions: str, prompts: list[dict[str, Any]], resources: list[dict[str, Any]],
                resource_templates: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Findings in what a server says besides its tools: its `instructions`, its prompts (names, titles,
    descriptions, argument descriptions) and its resources' and resource templates' descriptions."""
    texts: list[tuple[str, str]] = [("instructions", instructions or "")]
    for kind, items in (("prompt", prompts), ("resource", resources), ("resource template", resource_templates)):
        for item in items or []:
            label = f"{kind} {item.get('name') or item.get('uri') or item.get('uriTemplate') or '?'}"
            texts += [(f"{label} {key}", item[key]) for key in ("title", "description")
                      if isinstance(item.get(key), str)]
            texts += [(f"{label} argument {arg.get('name', '?')}", arg["description"])
                      for arg in item.get("arguments") or [] if isinstance(arg, dict)
                      and isinstance(arg.get("description"), str)]
    findings: list[Finding] = []
    for where, text in texts:
        if text:
            findings += [*scan_text(text, where=where),
                         *_hiding_findings(text, where=where, limit=SERVER_TEXT_LIMIT)]
    unique = {(f.code, f.where): f for f in findings if f.severity != Severity.LOW}
    return [f.as_dict() for f in unique.values()]


SERVER_TEXT_LIMIT = 10 * DESCRIPTION_LIMIT
LONG_BLANK = re.compile(r"\s{200,}\S")


def _hiding_findings(text: str, *, where: str, limit: int) -> list[Finding]:
    """Text set where a person reading the definition will not see it: after a long run of blank space, or
    past the length a form shows. Everything is scanned (scan_text); this says it is hidden."""
    found = []
    if LONG_BLANK.search(text):
        found.append(Finding("hidden_after_whitespace", Severity.HIGH, where,
                             "Text follows a long run of blank space, where a person reading it will not see it."))
    if len(text) > limit and scan_text(text[limit:], where=where):
        found.append(Finding("hidden_past_limit", Severity.HIGH, where,
                             f"Past its first {limit} characters the text holds something the scan flags."))
    return found


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
    # Every form of the text worth matching (disguises.views): itself, and for text beyond ASCII its visible,
    # folded and Latin-skeleton forms, plus anything embedded as base64/hex/URL-encoding/HTML entities.
    text_views = list(views(text))
    # The rule words in each view, looked for once per view (the rule groups and the secret rules share them).
    present = [_present_words(view) for _, view in text_views]
    shown = 0 if ascii else 1
    visible = text_views[shown][1]
    found.extend(_rule_findings(text_views, present, where))
    if ("<!--" in visible or "[//]" in visible) and any(COMMENT_IMPERATIVE.search(c)
                                                        for c in HIDDEN_COMMENT.findall(visible)):
        found.append(Finding("hidden_comment", Severity.HIGH, where,
                             "A comment that a person reading the text would not see holds words aimed at the model."))
    secret = _search(_SECRET_RES, visible, present[shown])
    if secret is not None:
        near = visible[max(0, secret.start() - 80):secret.end() + 80]
        severity = Severity.HIGH if SECRET_ACCESS.search(near) else Severity.MEDIUM
        found.append(Finding("secret_path", severity, where,
                             "Refers to secrets or credential files (keys, .env, ~/.ssh, credentials)."))
    found.extend(_url_findings(visible, where))
    if is_value and (URL_RE.search(visible) or EMAIL_RE.search(visible)):
        found.append(Finding("address_in_value", Severity.MEDIUM, where,
                             "A parameter value (enum/default/example) holds a URL or an email address: where data "
                             "would go."))
    if is_value and len(visible) > 80 and len(visible.split()) > 10:
        found.append(Finding("prose_in_value", Severity.MEDIUM, where,
                             "A parameter value (enum/default/example) holds prose; values should be data."))
    return found


def _rule_findings(text_views: list[tuple[str, str]], present: list[frozenset[str]], where: str) -> list[Finding]:
    """One finding per rule group that matches some view; a match only inside encoded text is
    `encoded_instruction` (high), naming the encoding."""
    found: list[Finding] = []
    encoded: set[str] = set()
    for code, severity, message, rules in _GROUP_RES:
        plain_match = False
        for (disguise, view), words in zip(text_views, present, strict=True):
            is_plain = disguise in ("", "unicode", "homoglyphs")
            if (is_plain and plain_match) or not _search(rules, view, words):
                continue
            if is_plain:  # one finding per group for what a reader sees; encoded text is looked at apart
                note = " (written with look-alike letters)" if disguise == "homoglyphs" else ""
                found.append(Finding(code, severity, where, message + note))
                plain_match = True
            else:
                encoded.add(disguise)
    for (disguise, view), words in zip(text_views, present, strict=True):  # an encoded ask to read a secret
        if disguise not in ("", "unicode", "homoglyphs") and (secret := _search(_SECRET_RES, view, words)) and \
                SECRET_ACCESS.search(view[max(0, secret.start() - 80):secret.end() + 80]):
            encoded.add(disguise)
    if encoded:
        found.append(Finding("encoded_instruction", Severity.HIGH, where,
                             f"Text encoded as {', '.join(sorted(encoded))} decodes to instructions aimed at the "
                             "model."))
    return found


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

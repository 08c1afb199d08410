"""Injection classifiers for the tests, standing in for the model a company would plug in (the process edge
this machine cannot reach): each judges the text it is given, as a real one would."""

import time

SEEN: list[str] = []


def flags_order_status(text: str) -> float:
    """Takes any order-status answer for an injection (the rule scanner does not): a slow model's verdict."""
    time.sleep(0.3)
    SEEN.append(text)
    return 0.93 if "A-1001" in text else 0.02


def clears_everything(text: str) -> float:
    SEEN.append(text)
    return 0.0


def never_answers(text: str) -> float:
    time.sleep(5)
    return 0.0


def breaks(text: str) -> float:
    raise ConnectionError("classifier endpoint down")

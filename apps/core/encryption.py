"""Secrets at rest: Fernet (AES-128-CBC + HMAC) with keys from AIRLOCK_ENCRYPTION_KEY.

Several comma-separated keys may be given, newest first: new values are encrypted with the
first, old ones still decrypt (MultiFernet), so keys can be rotated without downtime.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class DecryptionFailed(Exception):
    """A stored secret cannot be read with the configured keys (wrong or rotated-out key)."""


@cache
def _fernet() -> MultiFernet:
    keys = list(settings.AIRLOCK_ENCRYPTION_KEYS)
    if not keys:
        # Development only (a deploy check forbids this in production): derive from SECRET_KEY.
        digest = hashlib.sha256(f"airlock-secrets:{settings.SECRET_KEY}".encode()).digest()
        keys = [base64.urlsafe_b64encode(digest).decode()]
    return MultiFernet([Fernet(key.encode()) for key in keys])


def keyring() -> MultiFernet:
    """Every configured key, newest first (rotate_encryption_key re-encrypts under the first)."""
    return _fernet()


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str) -> str:
    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise DecryptionFailed("A stored secret could not be decrypted with AIRLOCK_ENCRYPTION_KEY.") from exc

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.test import override_settings

from apps.core import encryption
from apps.core.tasks import check_worker


def test_secrets_round_trip_and_are_not_stored_in_clear():
    token = encryption.encrypt("sk-very-secret")
    assert "sk-very-secret" not in token
    assert encryption.decrypt(token) == "sk-very-secret"


def test_keys_can_be_rotated_without_losing_old_secrets(settings):
    old = encryption.encrypt("old-secret")
    new_key = Fernet.generate_key().decode()
    with override_settings(AIRLOCK_ENCRYPTION_KEYS=[new_key, *settings.AIRLOCK_ENCRYPTION_KEYS]):
        encryption._fernet.cache_clear()
        try:
            assert encryption.decrypt(old) == "old-secret"
        finally:
            encryption._fernet.cache_clear()


def test_a_wrong_key_fails_with_a_clear_error(settings):
    with override_settings(AIRLOCK_ENCRYPTION_KEYS=[Fernet.generate_key().decode()]):
        encryption._fernet.cache_clear()
        try:
            with pytest.raises(encryption.DecryptionFailed, match="AIRLOCK_ENCRYPTION_KEY"):
                encryption.decrypt(Fernet(Fernet.generate_key()).encrypt(b"x").decode())
        finally:
            encryption._fernet.cache_clear()


def test_tasks_refuse_anything_but_ids():
    with pytest.raises(TypeError, match="must be ids"):
        check_worker.delay({"org": "object"}, "x")

"""SMTP settings come from EMAIL_URL or the separate EMAIL_* variables; with neither, mail goes to the log."""

from __future__ import annotations

import pytest

from config.settings import email_settings


def test_an_email_url_with_starttls_and_an_encoded_password():
    values = email_settings({"EMAIL_URL": "smtp+tls://mailer%40acme.test:p%3Ass%2Fw@smtp.acme.test:2587"})
    assert values["EMAIL_BACKEND"] == "django.core.mail.backends.smtp.EmailBackend"
    assert (values["EMAIL_HOST"], values["EMAIL_PORT"]) == ("smtp.acme.test", 2587)
    assert (values["EMAIL_HOST_USER"], values["EMAIL_HOST_PASSWORD"]) == ("mailer@acme.test", "p:ss/w")
    assert values["EMAIL_USE_TLS"] and not values["EMAIL_USE_SSL"]


def test_smtps_means_implicit_tls_on_465_and_plain_smtp_port_25():
    assert email_settings({"EMAIL_URL": "smtps://u:p@mail.test"})["EMAIL_PORT"] == 465
    assert email_settings({"EMAIL_URL": "smtps://u:p@mail.test"})["EMAIL_USE_SSL"]
    plain = email_settings({"EMAIL_URL": "smtp://mail.test"})
    assert plain["EMAIL_PORT"] == 25 and not plain["EMAIL_USE_TLS"] and plain["EMAIL_HOST_USER"] == ""


def test_separate_variables_and_no_server_at_all():
    values = email_settings({"EMAIL_HOST": "relay.test", "EMAIL_USE_TLS": "1", "EMAIL_HOST_USER": "u",
                             "EMAIL_HOST_PASSWORD": "secret"})
    assert (values["EMAIL_HOST"], values["EMAIL_PORT"], values["EMAIL_USE_TLS"]) == ("relay.test", 587, True)
    assert values["EMAIL_HOST_PASSWORD"] == "secret"
    assert email_settings({})["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"


def test_a_wrong_scheme_or_tls_and_ssl_together_stop_the_start():
    with pytest.raises(RuntimeError, match="EMAIL_URL must start with"):
        email_settings({"EMAIL_URL": "http://mail.test"})
    with pytest.raises(RuntimeError, match="not both"):
        email_settings({"EMAIL_HOST": "relay.test", "EMAIL_USE_TLS": "1", "EMAIL_USE_SSL": "1"})

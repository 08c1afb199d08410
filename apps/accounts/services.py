"""Writes for organisations, members and API tokens. Each is one transaction with its audit row."""

from __future__ import annotations

import secrets
from datetime import timedelta
from uuid import UUID

from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from apps.accounts import selectors
from apps.accounts.actors import Actor, system_actor
from apps.accounts.models import ApiToken, IdentityProvider, Invite, Membership, Organization
from apps.accounts.roles import RANK, TOKEN_ROLES, Role, token_role
from apps.audit import services as audit
from apps.core import egress, realtime
from apps.core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed

User = get_user_model()
TOKEN_PREFIX = "al_"
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _clean_email(email: str) -> str:
    email = selectors.normalize_email(email)
    try:
        validate_email(email)
    except DjangoValidationError:
        raise ValidationFailed("Enter a valid email address.", {"email": "Enter a valid email address."}) from None
    return email


def _clean_role(role: str, *, allowed: list[str] | None = None) -> Role:
    allowed = allowed or list(Role.values)
    if role not in allowed:
        message = f"Role must be one of: {', '.join(allowed)}."
        raise ValidationFailed(message, {"role": message})
    return Role(role)


def _unique_slug(base: str) -> str:
    base = slugify(base)[:50] or "org"
    slug, n = base, 1
    while Organization.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


def _new_user(email: str, password: str | None = None) -> tuple[object, str | None]:
    """Creates a user; with no password given, a random one is generated and returned once."""
    generated = None
    if password is None:
        generated = password = secrets.token_urlsafe(12)
    user = User(username=email, email=email)
    user.set_password(password)
    user.save()
    return user, generated


def create_organization(*, name: str, owner_email: str, slug: str = "", password: str | None = None,
                        via: str = "operator") -> tuple[Organization, Membership, str | None]:
    """Creates an organisation and its owner (a new user gets a printed password).

    Writes Organization, Membership (owner), maybe User, and an `org.created` audit event.
    Raises ValidationFailed (bad email/slug) and Conflict (slug taken).
    """
    email = _clean_email(owner_email)
    name = name.strip()
    if not name:
        raise ValidationFailed("Give the organisation a name.", {"name": "This field is required."})
    if slug:
        if slugify(slug) != slug:
            raise ValidationFailed("Slugs use lowercase letters, digits and hyphens.", {"slug": "Invalid slug."})
        if Organization.objects.filter(slug=slug).exists():
            raise Conflict(f"The slug {slug!r} is taken.")
    with transaction.atomic():
        org = Organization.objects.create(name=name, slug=slug or _unique_slug(name))
        user = selectors.user_by_email(email)
        generated = None
        if user is None:
            if password is not None:
                _validate_password(password, email)
            user, generated = _new_user(email, password)
        membership = Membership.objects.create(org=org, user=user, role=Role.OWNER)
        from apps.registry.builtin import add_builtin_tools  # later app: a new org's built-in human.ask server

        add_builtin_tools(org_id=org.id)
        audit.record(org_id=org.id, actor=system_actor(org.id, via), action="org.created", target=org,
                     data={"owner": email})
    return org, membership, generated


def _validate_password(password: str, email: str) -> None:
    try:
        password_validation.validate_password(password, User(username=email, email=email))
    except DjangoValidationError as exc:
        raise ValidationFailed(" ".join(exc.messages), {"password": " ".join(exc.messages)}) from None


def sign_up(*, email: str, password: str, org_name: str, ip: str | None = None) -> tuple[object, Organization]:
    """Self-serve sign-up: a new user and an organisation they own.

    Raises ValidationFailed when the email is taken or the password is weak.
    """
    email = _clean_email(email)
    if selectors.user_by_email(email) is not None:
        raise ValidationFailed("An account with this email exists; sign in instead.",
                               {"email": "An account with this email exists; sign in instead."})
    _validate_password(password, email)
    org, membership, _ = create_organization(name=org_name, owner_email=email, password=password, via="sign-up")
    return membership.user, org


def record_sign_in(*, user, ip: str | None) -> None:
    """Writes `auth.signed_in` to each organisation the user belongs to."""
    with transaction.atomic():
        for membership in selectors.memberships_of(user_id=user.pk):
            actor = Actor(org_id=membership.org_id, role=membership.role, label=user.email, user_id=user.pk, ip=ip)
            audit.record(org_id=membership.org_id, actor=actor, action="auth.signed_in", target=user,
                         target_label=user.email)


def record_failed_sign_in(*, email: str, ip: str | None) -> None:
    """Writes `auth.sign_in_failed` to the user's organisations (or the global chain for unknown emails)."""
    email = selectors.normalize_email(email)[:200]
    user = selectors.user_by_email(email)
    with transaction.atomic():
        orgs = [m.org_id for m in selectors.memberships_of(user_id=user.pk)] if user else [None]
        for org_id in orgs:
            actor = Actor(org_id=org_id, role="viewer", label=email or "(blank)", ip=ip)  # type: ignore[arg-type]
            audit.record(org_id=org_id, actor=actor, action="auth.sign_in_failed", data={"email": email})


def notify_access_changed(*, user_id: int) -> None:
    """Tells the user's open sockets, once the current transaction commits, that their sign-in or a
    membership changed: each checks its session and membership again and closes or narrows. Call it
    after signing a session out, changing a password, or changing or removing a membership."""
    realtime.publish_after_commit(realtime.user_group(user_id), realtime.ACCESS_CHANGED)


def record_password_changed(*, user, ip: str | None) -> None:
    """Writes `auth.password_changed` to each of the user's organisations; their other sessions no
    longer sign in, so their sockets are told."""
    with transaction.atomic():
        for membership in selectors.memberships_of(user_id=user.pk):
            actor = Actor(org_id=membership.org_id, role=membership.role, label=user.email, user_id=user.pk, ip=ip)
            audit.record(org_id=membership.org_id, actor=actor, action="auth.password_changed", target=user,
                         target_label=user.email)
        notify_access_changed(user_id=user.pk)


def _guard_role_change(actor: Actor, *, current: str | None, new: str | None) -> None:
    """Only owners touch owners; nobody grants more than they hold."""
    if Role.OWNER in (current, new) and actor.role != Role.OWNER:
        raise PermissionDenied("Only an owner can grant, change or remove the owner role.")
    if new is not None and RANK[Role(new)] > RANK[Role(actor.role)]:
        raise PermissionDenied("You cannot grant a role above your own.")


def add_member(*, actor: Actor, email: str, role: str) -> tuple[Membership, str | None]:
    """Adds a user (created if new, with a one-time password returned) to the actor's organisation.

    Raises PermissionDenied, ValidationFailed, Conflict (already a member).
    """
    actor.require("members.manage")
    email = _clean_email(email)
    role = _clean_role(role)
    _guard_role_change(actor, current=None, new=role)
    with transaction.atomic():
        user = selectors.user_by_email(email)
        generated = None
        if user is None:
            user, generated = _new_user(email)
        elif Membership.objects.filter(org_id=actor.org_id, user=user).exists():
            raise Conflict(f"{email} is already a member.")
        membership = Membership.objects.create(org_id=actor.org_id, user=user, role=role)
        audit.record(org_id=actor.org_id, actor=actor, action="member.added", target=membership,
                     target_label=email, data={"email": email, "role": role, "new_user": generated is not None})
    return membership, generated


def _owner_count(org_id: UUID) -> int:
    # Locking the owner rows serialises concurrent demotions of the last two owners.
    return len(list(Membership.objects.select_for_update().filter(org_id=org_id, role=Role.OWNER)))


def change_role(*, actor: Actor, member_id: UUID | str, role: str) -> Membership:
    """Changes a member's role; their open sockets take the new one. Raises PermissionDenied,
    ValidationFailed, NotFound, Conflict (last owner)."""
    actor.require("members.manage")
    with transaction.atomic():
        # Look up first: another organisation's id is "not found" whatever the role given.
        membership = selectors.get_member(org_id=actor.org_id, member_id=member_id)
        role = _clean_role(role)
        old = membership.role
        if old == role:
            return membership
        _guard_role_change(actor, current=old, new=role)
        if old == Role.OWNER and _owner_count(actor.org_id) <= 1:
            raise Conflict("An organisation needs at least one owner: make someone else owner first.")
        membership.role = role
        membership.save(update_fields=["role", "updated_at"])
        audit.record(org_id=actor.org_id, actor=actor, action="member.role_changed", target=membership,
                     target_label=membership.user.email, data={"from": old, "to": role})
        notify_access_changed(user_id=membership.user_id)
    return membership


def remove_member(*, actor: Actor, member_id: UUID | str) -> None:
    """Removes a member (the user account stays); their open sockets of the organisation close.
    Raises PermissionDenied, NotFound, Conflict (last owner)."""
    actor.require("members.manage")
    with transaction.atomic():
        membership = selectors.get_member(org_id=actor.org_id, member_id=member_id)
        _guard_role_change(actor, current=membership.role, new=None)
        if membership.role == Role.OWNER and _owner_count(actor.org_id) <= 1:
            raise Conflict("The last owner cannot be removed.")
        email = membership.user.email
        audit.record(org_id=actor.org_id, actor=actor, action="member.removed", target=membership,
                     target_label=email, data={"email": email, "role": membership.role})
        membership.delete()
        notify_access_changed(user_id=membership.user_id)


def reset_member_password(*, actor: Actor, member_id: UUID | str) -> tuple[Membership, str]:
    """Gives a member a new random password, returned once for the admin to hand over (the member changes it
    after signing in); their other sessions stop signing in. Refused for oneself (use the password form),
    for a role above the actor's or an owner by a non-owner, and for a person who also belongs to another
    organisation: an admin here must not take over their account there (they use the emailed reset link).

    Writes the user's password + `member.password_reset` audit. Raises PermissionDenied, NotFound, Conflict.
    """
    actor.require("members.manage")
    with transaction.atomic():
        membership = selectors.get_member(org_id=actor.org_id, member_id=member_id)
        user = membership.user
        if user.pk == actor.user_id:
            raise Conflict("Change your own password under Account → Password.")
        _guard_role_change(actor, current=membership.role, new=None)
        if RANK[Role(membership.role)] > RANK[Role(actor.role)]:
            raise PermissionDenied("You cannot reset the password of a role above your own.")
        if user.is_superuser or selectors.memberships_of(user_id=user.pk).exclude(org_id=actor.org_id).exists():
            raise Conflict(f"{user.email} also belongs to another organisation, so only they can reset their "
                           "password: “Forgot your password?” on the sign-in page emails them a link.")
        password = secrets.token_urlsafe(12)
        user.set_password(password)
        user.save(update_fields=["password"])
        audit.record(org_id=actor.org_id, actor=actor, action="member.password_reset", target=membership,
                     target_label=user.email, data={"email": user.email})
        notify_access_changed(user_id=user.pk)
    return membership, password


def create_api_token(*, actor: Actor | None, org_id: UUID, name: str, role: str,
                     member_email: str | None = None) -> tuple[ApiToken, str]:
    """Creates a token held by a member and returns it with its value (shown once; only the hash is stored).

    A person's token is theirs (the actor's membership). `actor=None` is the operator path
    (manage.py create_token): the token belongs to the member with `member_email`, else the
    organisation's earliest owner. Raises PermissionDenied, ValidationFailed, NotFound (no such member).
    """
    if actor is not None:
        actor.require("tokens.manage")
        if actor.user_id is None:
            raise PermissionDenied("Only a member can hold a token.")
        member = selectors.membership_for(user_id=actor.user_id, org_id=org_id)
        if member is None:
            raise PermissionDenied("Only a member can hold a token.")
    else:
        member = selectors.token_holder(org_id=org_id, email=member_email)
    name = name.strip()
    if not name:
        raise ValidationFailed("Give the token a name.", {"name": "This field is required."})
    role = _clean_role(role, allowed=list(TOKEN_ROLES))
    if actor is not None and RANK[role] > RANK[Role(actor.role)]:
        raise PermissionDenied("You cannot create a token with a role above your own.")
    if token_role(token_role=role, member_role=member.role) != role:
        message = f"{member.user.email} is {member.role}: their token cannot be {role}."
        raise ValidationFailed(message, {"role": message})
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(org_id=org_id, name=name[:100], role=role, prefix=raw[:10],
                                        token_hash=selectors.hash_token(raw), member=member,
                                        created_by_id=actor.user_id if actor is not None else None)
        audit.record(org_id=org_id, actor=actor or system_actor(org_id, "operator"), action="token.created",
                     target=token, target_label=token.name,
                     data={"name": token.name, "role": role, "member": member.user.email})
    return token, raw


def revoke_api_token(*, actor: Actor, token_id: UUID | str) -> ApiToken:
    """Revokes a token at once. Raises PermissionDenied, NotFound."""
    actor.require("tokens.manage")
    with transaction.atomic():
        token = selectors.get_token(org_id=actor.org_id, token_id=token_id)
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at", "updated_at"])
            audit.record(org_id=actor.org_id, actor=actor, action="token.revoked", target=token,
                         target_label=token.name, data={"name": token.name})
    return token


def note_token_used(*, token: ApiToken) -> None:
    """Updates last_used_at at most once a minute (a write per request would be waste)."""
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


def ensure_user(*, email: str, password: str):
    """Creates a user with this password unless one exists (operator and demo paths)."""
    email = _clean_email(email)
    user = selectors.user_by_email(email)
    if user is None:
        user, _ = _new_user(email, password)
    return user


# --- Single sign-on -------------------------------------------------------------------------------

def _clean_domains(domains: str | list[str]) -> list[str]:
    items = domains.replace(",", " ").split() if isinstance(domains, str) else list(domains)
    cleaned = []
    for item in items:
        domain = item.strip().lower().lstrip("@")
        if not domain:
            continue
        if "@" in domain or "." not in domain or "/" in domain:
            message = f"{item!r} is not an email domain (like example.com)."
            raise ValidationFailed(message, {"allowed_domains": message})
        cleaned.append(domain)
    if not cleaned:
        message = "Name at least one email domain whose people may sign in (like example.com)."
        raise ValidationFailed(message, {"allowed_domains": message})
    return sorted(set(cleaned))


def configure_identity_provider(*, actor: Actor, name: str, issuer_url: str, client_id: str,
                                client_secret: str = "", allowed_domains: str | list[str] = "",
                                default_role: str = Role.VIEWER, sso_required: bool = False,
                                enabled: bool = True) -> IdentityProvider:
    """Creates or updates the organisation's OpenID Connect provider. A blank `client_secret` keeps the
    stored one (it is write-only). Writes IdentityProvider and an `sso.configured` audit event (no secret).
    Raises PermissionDenied (not owner/admin), ValidationFailed (field errors)."""

    actor.require("members.manage")
    errors: dict[str, str] = {}
    name, client_id, issuer_url = name.strip(), client_id.strip(), issuer_url.strip().rstrip("/")
    if not name:
        errors["name"] = "Give the provider a name people recognise, like 'Acme Okta'."
    if not client_id:
        errors["client_id"] = "This field is required."
    if not issuer_url.startswith(("https://", "http://")):
        errors["issuer_url"] = "Give the issuer URL, like https://login.example.com/realms/acme."
    elif refusal := egress.save_time_error(issuer_url):
        errors["issuer_url"] = refusal
    if default_role not in Role.values or default_role == Role.OWNER:
        errors["default_role"] = "New members can join at any role but owner."
    existing = selectors.identity_provider_of(org_id=actor.org_id)
    if not client_secret and (existing is None or not (existing.client_secret or {}).get("value")):
        errors["client_secret"] = "This field is required."
    try:
        domains = _clean_domains(allowed_domains)
    except ValidationFailed as exc:
        errors.update(exc.errors)
    if errors:
        raise ValidationFailed("Check the highlighted fields.", errors)
    with transaction.atomic():
        idp = existing or IdentityProvider(org_id=actor.org_id)
        idp.name, idp.issuer_url, idp.client_id = name[:80], issuer_url, client_id
        idp.allowed_domains, idp.default_role = domains, default_role
        idp.sso_required, idp.enabled = sso_required, enabled
        if client_secret:
            idp.client_secret = {"value": client_secret}
        idp.save()
        audit.record(org_id=actor.org_id, actor=actor, action="sso.configured", target=idp, target_label=idp.name,
                     data={"issuer_url": issuer_url, "client_id": client_id, "allowed_domains": domains,
                           "default_role": default_role, "sso_required": sso_required, "enabled": enabled,
                           "secret_changed": bool(client_secret)})
    return idp


def join_through_sso(*, idp: IdentityProvider, user, ip: str | None) -> Membership:
    """The membership of a person the organisation's provider vouched for: theirs if they have one,
    else a new one at the provider's default role (just-in-time), audited as `member.joined_via_sso`."""
    with transaction.atomic():
        membership = Membership.objects.filter(org_id=idp.org_id, user=user).first()
        if membership is not None:
            return membership
        membership = Membership.objects.create(org_id=idp.org_id, user=user, role=idp.default_role)
        audit.record(org_id=idp.org_id, actor=system_actor(idp.org_id, f"single sign-on ({idp.name})"),
                     action="member.joined_via_sso", target=membership, target_label=user.email,
                     data={"email": user.email, "role": idp.default_role, "ip": ip})
    return membership


# --- Invites --------------------------------------------------------------------------------------

INVITE_TTL = timedelta(days=7)


def invite_member(*, actor: Actor, email: str, role: str, accept_url: str) -> tuple[Invite, str]:
    """Invites `email` at `role` and emails them the link (`accept_url` with `{token}` in it) once the
    transaction commits. Returns the invite and the link. Writes Invite and `member.invited`.
    Raises PermissionDenied, ValidationFailed, Conflict (already a member or already invited)."""
    actor.require("members.manage")
    email = _clean_email(email)
    role = _clean_role(role)
    _guard_role_change(actor, current=None, new=role)
    raw = secrets.token_urlsafe(32)
    link = accept_url.format(token=raw)
    with transaction.atomic():
        if Membership.objects.filter(org_id=actor.org_id, user__username=email).exists():
            raise Conflict(f"{email} is already a member.")
        if selectors.pending_invites(org_id=actor.org_id).filter(email=email).exists():
            raise Conflict(f"{email} has an open invite: revoke it first to send another.")
        invite = Invite.objects.create(org_id=actor.org_id, email=email, role=role,
                                       token_hash=selectors.hash_token(raw), invited_by_id=actor.user_id,
                                       expires_at=timezone.now() + INVITE_TTL)
        audit.record(org_id=actor.org_id, actor=actor, action="member.invited", target=invite, target_label=email,
                     data={"email": email, "role": role, "expires_at": invite.expires_at.isoformat()})
        org_name = selectors.get_org(org_id=actor.org_id).name
        transaction.on_commit(lambda: _send_invite(email=email, org_name=org_name, inviter=actor.label,
                                                   role=role, link=link, expires_at=invite.expires_at))
    return invite, link


def _send_invite(*, email: str, org_name: str, inviter: str, role: str, link: str, expires_at) -> None:
    from django.core.mail import send_mail
    from django.template.loader import render_to_string

    body = render_to_string("web/auth/invite_email.txt", {"org_name": org_name, "inviter": inviter,
                                                           "role": Role(role).label, "link": link,
                                                           "expires_at": expires_at})
    send_mail(f"{inviter} invited you to {org_name} on Airlock", body, None, [email])


def revoke_invite(*, actor: Actor, invite_id: UUID | str) -> Invite:
    """Revokes a pending invite: its link stops working. Raises PermissionDenied, NotFound."""

    actor.require("members.manage")
    with transaction.atomic():
        invite = Invite.objects.filter(org_id=actor.org_id, id=invite_id).first() if _is_uuid(invite_id) else None
        if invite is None:
            raise NotFound("No such invite.")
        if invite.revoked_at is None and invite.accepted_at is None:
            invite.revoked_at = timezone.now()
            invite.save(update_fields=["revoked_at", "updated_at"])
            audit.record(org_id=actor.org_id, actor=actor, action="member.invite_revoked", target=invite,
                         target_label=invite.email, data={"email": invite.email})
    return invite


def _is_uuid(value) -> bool:
    try:
        UUID(str(value))
    except ValueError:
        return False
    return True


def invite_problem(invite: Invite | None) -> str:
    """Why an invite link no longer works, or '' when it does."""
    if invite is None:
        return "This invite link is not valid. Ask whoever invited you for a new one."
    if invite.revoked_at is not None:
        return "This invite was revoked. Ask whoever invited you for a new one."
    if invite.accepted_at is not None:
        return "This invite has been used already. Sign in instead."
    if invite.expires_at <= timezone.now():
        return "This invite has expired. Ask whoever invited you for a new one."
    return ""


def accept_invite(*, raw_token: str, user=None, password: str | None = None, ip: str | None = None):
    """Accepts an invite, once: a signed-in `user` (whose email must be the invited one) joins; else an
    account is created with `password` for the invited email. Returns (user, membership).
    Writes Invite.accepted_at, Membership, maybe User, `member.invite_accepted`.
    Raises ValidationFailed (link no longer works, weak password, wrong account), Conflict (already a member)."""
    with transaction.atomic():
        invite = selectors.invite_for_token(raw_token)
        if invite is not None:
            invite = Invite.objects.select_for_update().select_related("org").get(pk=invite.pk)
        if problem := invite_problem(invite):
            raise ValidationFailed(problem)
        if user is None:
            if selectors.user_by_email(invite.email) is not None:
                raise ValidationFailed(f"{invite.email} has an account: sign in, then open the link again.")
            if password is None:
                raise ValidationFailed("Choose a password.", {"password": "This field is required."})
            _validate_password(password, invite.email)
            user, _ = _new_user(invite.email, password)
        elif selectors.normalize_email(user.email) != invite.email:
            raise ValidationFailed(f"This invite is for {invite.email}; you are signed in as {user.email}.")
        if Membership.objects.filter(org_id=invite.org_id, user=user).exists():
            raise Conflict(f"{invite.email} is already a member of {invite.org.name}.")
        membership = Membership.objects.create(org_id=invite.org_id, user=user, role=invite.role)
        invite.accepted_at = timezone.now()
        invite.save(update_fields=["accepted_at", "updated_at"])
        actor = Actor(org_id=invite.org_id, role=invite.role, label=invite.email, user_id=user.pk, ip=ip)
        audit.record(org_id=invite.org_id, actor=actor, action="member.invite_accepted", target=membership,
                     target_label=invite.email, data={"email": invite.email, "role": invite.role})
        notify_access_changed(user_id=user.pk)
    return user, membership


def set_mfa_requirement(*, actor: Actor, required: bool) -> Organization:
    """Requires (or stops requiring) two-factor authentication of the organisation's owners, admins and
    approvers. Writes Organization.mfa_required and `org.mfa_requirement_changed`. Raises PermissionDenied."""
    actor.require("members.manage")
    with transaction.atomic():
        org = Organization.objects.select_for_update().get(pk=actor.org_id)
        if org.mfa_required != required:
            org.mfa_required = required
            org.save(update_fields=["mfa_required", "updated_at"])
            audit.record(org_id=org.id, actor=actor, action="org.mfa_requirement_changed", target=org,
                         data={"required": required})
    return org

"""API tokens belong to a member.

Existing tokens get the member who created them (`created_by`, else the user the `token.created`
audit row names) when that person is still a member of the token's organisation, otherwise the
organisation's earliest owner. A token whose organisation has no owner left keeps no member and
stops working.
"""

from django.db import migrations, models
import django.db.models.deletion


def assign_members(apps, schema_editor):
    ApiToken = apps.get_model("accounts", "ApiToken")
    Membership = apps.get_model("accounts", "Membership")
    AuditEvent = apps.get_model("audit", "AuditEvent")
    for token in ApiToken.objects.filter(member__isnull=True).iterator():
        creator_id = token.created_by_id or (
            AuditEvent.objects.filter(org_id=token.org_id, action="token.created", target_id=str(token.id))
            .values_list("actor_user_id", flat=True).first())
        member = (Membership.objects.filter(org_id=token.org_id, user_id=creator_id).first() if creator_id else None)
        if member is None:
            member = Membership.objects.filter(org_id=token.org_id, role="owner").order_by("created_at").first()
        if member is not None:
            ApiToken.objects.filter(pk=token.pk).update(member=member)


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0001_initial"),
        ("audit", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="member",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="api_tokens", to="accounts.membership"),
        ),
        migrations.RunPython(assign_members, migrations.RunPython.noop),
    ]

"""A group's day of spend becomes one row per stripe of runs (see apps/costs/rollup.py), refilled from the usage
rows so existing days are split the way new calls are."""

from django.db import migrations, models


def rebuild(apps, schema_editor):
    from apps.costs import rollup

    rollup.rebuild(using=schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ("costs", "0003_daily_spend"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="dailyspend", name="daily_spend_key"),
        migrations.AddField(model_name="dailyspend", name="stripe", field=models.PositiveSmallIntegerField(default=0)),
        migrations.AddConstraint(
            model_name="dailyspend",
            constraint=models.UniqueConstraint(fields=("org", "day", "crew_id", "agent_id", "provider", "model",
                                                       "stripe"), name="daily_spend_key"),
        ),
        migrations.RunPython(rebuild, migrations.RunPython.noop),
    ]

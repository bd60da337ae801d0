"""Production trajectories get a real unique key: (project, the producer's id).

Before it, the same id logged twice in one batch, or by concurrent requests, was
stored more than once. Those copies are the same logged run; the oldest is kept
(reviews and rescores hang off it first) and the later ones are removed before the
constraint is added.
"""

from django.db import migrations, models
from django.db.models import Count, Min


def drop_duplicate_production_rows(apps, schema_editor):
    Trajectory = apps.get_model("trajectories", "Trajectory")
    duplicated = (Trajectory.objects.filter(source="production").values("project_id", "task_key")
                  .annotate(n=Count("id"), first=Min("id")).filter(n__gt=1))
    for group in duplicated.iterator():
        (Trajectory.objects.filter(source="production", project_id=group["project_id"], task_key=group["task_key"])
         .exclude(pk=group["first"]).delete())


class Migration(migrations.Migration):

    dependencies = [
        ("projects", "0001_initial"),
        ("trajectories", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="trajectory",
            options={"ordering": ["run", "step", "task_key", "sample_index"], "verbose_name_plural": "trajectories"},
        ),
        migrations.RunPython(drop_duplicate_production_rows, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="trajectory",
            constraint=models.UniqueConstraint(condition=models.Q(("source", "production")),
                                               fields=("project", "task_key"), name="uniq_production_trajectory"),
        ),
    ]

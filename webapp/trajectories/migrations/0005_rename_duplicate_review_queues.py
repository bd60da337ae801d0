"""Review-queue names become unique per project (the constraint itself is 0006).

Concurrent creates could make several queues with one name. Before the constraint is added,
each set of duplicates keeps its oldest queue's name as it is and the others are renamed
"name (2)", "name (3)", ... in creation order, skipping any name the project already uses and
cut to fit the 200-character column. Reversing keeps the new names. A migration of its own:
PostgreSQL refuses to alter a table in the transaction that has just updated its rows.
"""

from django.db import migrations, models

NAME_LENGTH = 200


def _free_name(name: str, taken: set[str]) -> str:
    """`name (n)` for the smallest n >= 2 the project does not use, cut so the suffix still fits."""
    number = 2
    while True:
        suffix = f" ({number})"
        candidate = name[: NAME_LENGTH - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
        number += 1


def rename_duplicates(apps, schema_editor):
    """Every queue but the oldest of each (project, name) gets a free `name (n)`."""
    ReviewQueue = apps.get_model("trajectories", "ReviewQueue")
    duplicated = (ReviewQueue.objects.values("project_id", "name").annotate(n=models.Count("id"))
                  .filter(n__gt=1).order_by("project_id", "name"))
    for group in duplicated:
        taken = set(ReviewQueue.objects.filter(project_id=group["project_id"]).values_list("name", flat=True))
        queues = ReviewQueue.objects.filter(project_id=group["project_id"], name=group["name"]).order_by(
            "created_at", "id")
        for queue in list(queues)[1:]:
            queue.name = _free_name(group["name"], taken)
            taken.add(queue.name)
            queue.save(update_fields=["name"])


class Migration(migrations.Migration):

    dependencies = [
        ("trajectories", "0004_task_key_index"),
    ]

    operations = [
        migrations.RunPython(rename_duplicates, migrations.RunPython.noop),
    ]

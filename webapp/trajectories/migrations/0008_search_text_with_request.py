"""Trajectories of a training run hold only what the model wrote and the tools answered: their search
text gains their task's request (search_text_of_turns' `request`), so a search for words of the
request finds them. Only trajectories with a task and no user turn change; batched."""

from django.db import migrations


def add_requests(apps, schema_editor):
    from webapp.trajectories.models import search_text_of_turns

    Trajectory = apps.get_model("trajectories", "Trajectory")
    rows = (Trajectory.objects.filter(task__isnull=False).select_related("task")
            .only("id", "turns", "task__messages").order_by("id"))
    batch = []
    for row in rows.iterator(chunk_size=2000):
        if any(isinstance(t, dict) and t.get("role") == "user" for t in row.turns or []):
            continue
        row.search_text = search_text_of_turns(row.turns, row.task.messages)
        batch.append(row)
        if len(batch) >= 2000:
            Trajectory.objects.bulk_update(batch, ["search_text"])
            batch = []
    Trajectory.objects.bulk_update(batch, ["search_text"])


class Migration(migrations.Migration):

    dependencies = [
        ("trajectories", "0007_trajectory_search_text"),
        ("datasets", "0003_lineage_stats_search"),
    ]

    operations = [migrations.RunPython(add_requests, migrations.RunPython.noop)]

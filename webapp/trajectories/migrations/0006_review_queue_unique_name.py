"""One review-queue name per project; 0005 renamed the duplicates that concurrent creates had made."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("trajectories", "0005_rename_duplicate_review_queues"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="reviewqueue",
            constraint=models.UniqueConstraint(fields=("project", "name"), name="uniq_review_queue_name"),
        ),
    ]

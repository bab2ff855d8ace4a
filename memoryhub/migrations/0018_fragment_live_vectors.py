"""Each writer's live vectors held again in an index of their own (a person's,
an agent's), so that a write's judgement finds the writer's nearest facts by
an index-only scan instead of reading every one of their rows' vectors from
the table.

Built concurrently: reads and writes of memory go on while it is built (the
migration then runs outside a transaction). Only fragments that someone owns,
live and embedded, are in it; a connected source's are not."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('memoryhub', '0017_fragment_search_counts'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='fragment',
            index=models.Index(condition=models.Q(('embedding__isnull', False), ('owner_user__isnull', False), ('retired_at__isnull', True)), fields=['tenant', 'owner_user'], include=('id', 'embedding'), name='fragment_live_user_vectors'),
        ),
        AddIndexConcurrently(
            model_name='fragment',
            index=models.Index(condition=models.Q(('embedding__isnull', False), ('owner_agent__isnull', False), ('retired_at__isnull', True)), fields=['tenant', 'owner_agent'], include=('id', 'embedding'), name='fragment_live_agent_vectors'),
        ),
    ]

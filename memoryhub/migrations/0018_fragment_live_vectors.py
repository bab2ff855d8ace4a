"""Each writer's live vectors held again in an index of their own (a person's,
an agent's), so that a write's judgement finds the writer's nearest facts by
an index-only scan instead of reading every one of their rows' vectors from
the table.

Built concurrently: reads and writes of memory go on while each is built (the
migration runs outside a transaction), but a build waits for every
transaction older than it to end first, so a long one in another process
holds the migration up. A build that fails or is interrupted leaves an
invalid index under its name; running the migration again drops that and
builds it anew. Only fragments that someone owns, live and embedded, are in
them; a connected source's are not."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class AddIndexAnew(AddIndexConcurrently):
    """AddIndexConcurrently, after dropping what an earlier, failed build of
    the same index left under its name (the migration is not recorded then,
    so this runs again)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):  # type: ignore[no-untyped-def]
        self._ensure_not_in_transaction(schema_editor)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(self.index.name)}")
        super().database_forwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('memoryhub', '0017_fragment_search_counts'),
    ]

    operations = [
        AddIndexAnew(
            model_name='fragment',
            index=models.Index(condition=models.Q(('embedding__isnull', False), ('owner_user__isnull', False), ('retired_at__isnull', True)), fields=['tenant', 'owner_user'], include=('id', 'embedding'), name='fragment_live_user_vectors'),
        ),
        AddIndexAnew(
            model_name='fragment',
            index=models.Index(condition=models.Q(('embedding__isnull', False), ('owner_agent__isnull', False), ('retired_at__isnull', True)), fields=['tenant', 'owner_agent'], include=('id', 'embedding'), name='fragment_live_agent_vectors'),
        ),
    ]

"""Fragments carry a searchable context (their date, their document's title,
the turn before them) and their place in their document; the search vector
weighs a fragment's own words A and its context B, and keeps its length in
words for the lexical ranker (BM25)."""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

import memoryhub.models

# Every existing fragment gets the context a new one would: its date in words
# (UTC, as memoryhub.services.indexing writes it) and, for a document's
# fragments, the document's title.
BACKFILL = """
UPDATE memoryhub_fragment AS f
   SET context = concat_ws(
       E'\\n',
       to_char(f.created_at AT TIME ZONE 'UTC', 'FMDD FMMonth YYYY'),
       nullif((SELECT r.title
                 FROM memoryhub_resource AS r
                 JOIN memoryhub_fragment_resources AS fr ON fr.resource_id = r.id
                WHERE fr.fragment_id = f.id AND f.source_id IS NOT NULL AND r.source_id = f.source_id
                ORDER BY r.id LIMIT 1), ''))
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memoryhub', '0006_fragment_linked_at'),
    ]

    operations = [
        migrations.RunSQL(memoryhub.models.TSVECTOR_WORDS_FUNCTION,
                          "DROP FUNCTION IF EXISTS memoryhub_tsvector_words(tsvector)"),
        migrations.AddField(
            model_name='fragment',
            name='context',
            field=models.TextField(blank=True, db_default='', default='', help_text="Where the fragment sits (its date, its document's title, the turn before it): searched, never served."),
        ),
        migrations.AddField(
            model_name='fragment',
            name='position',
            field=models.PositiveIntegerField(blank=True, help_text='Its place in its document (turn or chunk order), when it came from one.', null=True),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.RemoveIndex(model_name='fragment', name='fragment_search_vector_gin'),
        migrations.RemoveField(model_name='fragment', name='search_vector'),
        migrations.AddField(
            model_name='fragment',
            name='search_vector',
            field=models.GeneratedField(db_persist=True, expression=memoryhub.models.SearchDocument(models.F('value'), models.F('context')), output_field=django.contrib.postgres.search.SearchVectorField()),
        ),
        migrations.AddField(
            model_name='fragment',
            name='search_length',
            field=models.GeneratedField(db_persist=True, expression=models.Func(memoryhub.models.SearchDocument(models.F('value'), models.F('context')), function='memoryhub_tsvector_words', output_field=models.IntegerField()), output_field=models.IntegerField()),
        ),
        migrations.AddIndex(
            model_name='fragment',
            index=django.contrib.postgres.indexes.GinIndex(fields=['search_vector'], name='fragment_search_vector_gin'),
        ),
    ]

"""Fragments keep each lexeme's counts as an own word and as context
(search_counts), the term frequencies BM25 looks a query word up in; adding
the column computes it for every stored fragment (a rewrite of the table)."""

import memoryhub.models
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memoryhub', '0016_fragment_tally_added_at'),
    ]

    operations = [
        migrations.RunSQL(memoryhub.models.TSVECTOR_COUNTS_FUNCTION,
                          "DROP FUNCTION IF EXISTS memoryhub_tsvector_counts(tsvector)"),
        migrations.AddField(
            model_name='fragment',
            name='search_counts',
            field=models.GeneratedField(db_persist=True, expression=models.Func(memoryhub.models.SearchDocument(models.F('value'), models.F('context')), function='memoryhub_tsvector_counts', output_field=models.JSONField()), output_field=models.JSONField()),
        ),
    ]

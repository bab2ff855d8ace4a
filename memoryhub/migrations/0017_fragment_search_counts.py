"""Fragments keep each lexeme's counts as an own word and as context
(search_counts), the term frequencies BM25 looks a query word up in.

Adding a stored generated column rewrites the fragment table: every stored
fragment's search document is worked out again and every index of the table
is rebuilt (the HNSW index too), while reads and writes of memory wait for
the table's lock. On a large workspace, run it in a maintenance window. The
tallies are untouched (a rewrite fires no trigger and search_length does not
change)."""

import memoryhub.models
from django.db import migrations, models

# Each lexeme of a search vector with how often it stands as a fragment's own
# word (weight A) and as its context's (any other weight). Immutable, as a
# generated column needs: what it calls is marked stable only because jsonb
# output in general may read settings; built from text and integers, it reads
# none.
COUNTS_FUNCTION = """
CREATE OR REPLACE FUNCTION memoryhub_tsvector_counts(tsvector) RETURNS jsonb
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT coalesce(jsonb_object_agg(u.lexeme, CASE WHEN cardinality(u.weights) > 0 THEN jsonb_build_array(
          cardinality(array_positions(u.weights, 'A')),
          cardinality(u.weights) - cardinality(array_positions(u.weights, 'A'))) END), '{}'::jsonb)
        FROM unnest($1) AS u $$
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memoryhub', '0016_fragment_tally_added_at'),
    ]

    operations = [
        migrations.RunSQL(COUNTS_FUNCTION,
                          "DROP FUNCTION IF EXISTS memoryhub_tsvector_counts(tsvector)"),
        migrations.AddField(
            model_name='fragment',
            name='search_counts',
            field=models.GeneratedField(db_persist=True, expression=models.Func(memoryhub.models.SearchDocument(models.F('value'), models.F('context')), function='memoryhub_tsvector_counts', output_field=models.JSONField()), output_field=models.JSONField()),
        ),
    ]

"""Hashes that confirm no guess: a fragment's value is committed in receipts
with an HMAC keyed by a salt of its own (wiped by an erasure), a receipt's
request by a salt only its reader sees. Receipts made before keep the record
format they were chained with (version 1: plain SHA-256). Erasures note when
their storage was cleaned; a receipt's reader can no longer be deleted from
under the chain."""

import django.db.models.deletion
import memoryhub.models
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memoryhub', '0011_fragment_grounded_versions_default'),
    ]

    operations = [
        migrations.AddField(
            model_name='erasure',
            name='storage_cleaned_at',
            field=models.DateTimeField(blank=True, help_text='When the old row versions and index entries left the storage.', null=True),
        ),
        migrations.AddField(
            model_name='fragment',
            name='value_salt',
            field=models.CharField(db_default=models.Func(function='gen_random_uuid', output_field=models.CharField()), default=memoryhub.models.new_salt, help_text='Keys the hash a receipt keeps of the value (HMAC), so the hash confirms no guess; wiped by an erasure.', max_length=36),
        ),
        migrations.AddField(
            model_name='receipt',
            name='record_version',
            field=models.PositiveSmallIntegerField(default=1, help_text="The chain record's format (memoryhub.services.receipt_chain.record_of)."),
        ),
        migrations.AlterField(
            model_name='receipt',
            name='record_version',
            field=models.PositiveSmallIntegerField(default=2, help_text="The chain record's format (memoryhub.services.receipt_chain.record_of)."),
        ),
        migrations.AddField(
            model_name='receipt',
            name='request_salt',
            field=models.CharField(blank=True, default='', help_text="Keys the request's hash in the chain (HMAC); shown to the reader only.", max_length=36),
        ),
        migrations.AlterField(
            model_name='receipt',
            name='request_salt',
            field=models.CharField(blank=True, default=memoryhub.models.new_salt, help_text="Keys the request's hash in the chain (HMAC); shown to the reader only.", max_length=36),
        ),
        migrations.AlterField(
            model_name='receipt',
            name='reader_agent',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='receipts', to='memoryhub.agent'),
        ),
        migrations.AlterField(
            model_name='receipt',
            name='reader_user',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='receipts', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='receipt',
            name='served_hashes',
            field=models.JSONField(default=list, help_text="The keyed hash (HMAC under the fragment's salt; plain SHA-256 in version 1 records) of each served fragment's stored value, in the order of `served`."),
        ),
        # Tombstones erased before salts existed keep none.
        migrations.RunSQL("UPDATE memoryhub_fragment SET value_salt = '' WHERE retired_reason = 'erased'",
                          migrations.RunSQL.noop),
    ]

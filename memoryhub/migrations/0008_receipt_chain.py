"""Serving receipts become a hash chain per workspace, with signed checkpoints
(memoryhub.services.receipt_chain, contract/receipt_chain.py).

Receipts written before the chain join it in the order they were made; the
hash each keeps of a served value is taken from the fragment's value at this
migration (an erased or missing fragment keeps null)."""

import django.db.models.deletion
from django.db import migrations, models

from contract.receipt_chain import GENESIS, content_hash, link_hash, value_hash


def chain_existing_receipts(apps, schema_editor):
    from memoryhub.services.receipt_chain import record_of

    Receipt = apps.get_model("memoryhub", "Receipt")
    Fragment = apps.get_model("memoryhub", "Fragment")
    ReceiptChain = apps.get_model("memoryhub", "ReceiptChain")
    tenants = Receipt.objects.values_list("tenant_id", flat=True).distinct()
    for tenant_id in tenants:
        head, seq = GENESIS, 0
        for receipt in Receipt.objects.filter(tenant_id=tenant_id).order_by("created_at", "id").iterator():
            values = dict(Fragment.objects.filter(pk__in=receipt.served or []).values_list("id", "value"))
            values = {str(pk): value for pk, value in values.items()}
            receipt.served_hashes = [value_hash(values[pk]) if pk in values else None for pk in receipt.served or []]
            seq += 1
            receipt.chain_seq, receipt.chain_prev = seq, head
            head = receipt.chain_hash = link_hash(head, seq, content_hash(record_of(receipt)))
            receipt.save(update_fields=["served_hashes", "chain_seq", "chain_prev", "chain_hash"])
        if seq:
            ReceiptChain.objects.create(tenant_id=tenant_id, seq=seq, prev=receipt.chain_prev, head=head)


class Migration(migrations.Migration):

    dependencies = [
        ("memoryhub", "0007_fragment_context"),
    ]

    operations = [
        migrations.CreateModel(
            name="ReceiptChain",
            fields=[
                ("tenant", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True,
                                                related_name="receipt_chain", serialize=False,
                                                to="memoryhub.tenant")),
                ("seq", models.BigIntegerField()),
                ("prev", models.CharField(max_length=64)),
                ("head", models.CharField(max_length=64)),
            ],
        ),
        migrations.CreateModel(
            name="ReceiptCheckpoint",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("seq", models.BigIntegerField()),
                ("head", models.CharField(max_length=64)),
                ("signed_at", models.DateTimeField()),
                ("key_id", models.CharField(max_length=16)),
                ("signature", models.CharField(max_length=128)),
                ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                             related_name="receipt_checkpoints", to="memoryhub.tenant")),
            ],
            options={
                "indexes": [models.Index(fields=["tenant", "-seq"], name="checkpoint_latest")],
            },
        ),
        migrations.AddField(
            model_name="receipt",
            name="served_hashes",
            field=models.JSONField(default=list, help_text="SHA-256 of each served fragment's stored value, in the order of `served`."),
        ),
        migrations.AddField(model_name="receipt", name="chain_seq", field=models.BigIntegerField(null=True)),
        migrations.AddField(model_name="receipt", name="chain_prev", field=models.CharField(max_length=64, default="")),
        migrations.AddField(model_name="receipt", name="chain_hash", field=models.CharField(max_length=64, default="")),
        migrations.RunPython(chain_existing_receipts, migrations.RunPython.noop),
        migrations.AlterField(model_name="receipt", name="chain_seq", field=models.BigIntegerField()),
        migrations.AlterField(model_name="receipt", name="chain_prev", field=models.CharField(max_length=64)),
        migrations.AlterField(model_name="receipt", name="chain_hash", field=models.CharField(max_length=64)),
        migrations.AddConstraint(
            model_name="receipt",
            constraint=models.UniqueConstraint(fields=("tenant", "chain_seq"), name="receipt_chain_place"),
        ),
    ]

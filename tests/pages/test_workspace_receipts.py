"""The receipt chain page: the public key to publish, the head, the latest
checkpoints and a button to sign one now; admins of the workspace only."""

from __future__ import annotations

import json
import re

from memoryhub.models import ReceiptCheckpoint
from memoryhub.services import receipt_chain
from tests.conftest import signed_in
from tests.pages.helpers import search


def test_it_shows_the_key_and_signs_a_checkpoint(people):
    search(people.bruno, "TLS certificates")
    search(people.bruno, "deploy checklist")
    client = signed_in(people.ada)
    page = client.get("/workspace/receipts/").content.decode()
    key = re.search(r'id="public-key">(ed25519:[0-9a-f]{64})<', page).group(1)
    assert key == receipt_chain.chain_overview(caller=people.system()).public_key
    assert 'id="chain-head-seq">2<' in page and "No checkpoint yet" in page
    response = client.post("/workspace/receipts/checkpoint/", follow=True)
    assert "Checkpoint signed at entry 2." in response.content.decode()
    checkpoint = ReceiptCheckpoint.objects.get(tenant=people.acme)
    page = client.get("/workspace/receipts/").content.decode()
    line = json.loads(re.search(r"<pre class=\"wrap\">(\{.*?\})</pre>", page).group(1).replace("&quot;", '"'))
    assert line == receipt_chain.checkpoint_item(checkpoint)
    again = client.post("/workspace/receipts/checkpoint/", follow=True).content.decode()
    assert "nothing to sign" in again and ReceiptCheckpoint.objects.filter(tenant=people.acme).count() == 1


def test_it_validates_ownership(people):
    search(people.bruno, "TLS certificates")
    assert signed_in(people.bruno).get("/workspace/receipts/").status_code == 403
    assert signed_in(people.bruno).post("/workspace/receipts/checkpoint/").status_code == 403
    signed_in(people.olga).post("/workspace/receipts/checkpoint/")
    assert not ReceiptCheckpoint.objects.filter(tenant=people.acme).exists()
    assert 'id="chain-head-seq">0<' in signed_in(people.olga).get("/workspace/receipts/").content.decode()

"""Evidence in Chromium: an admin signs a checkpoint and reads the key to
publish, a person downloads their memory, an admin erases a person's memory;
every page renders under the CSP and fits a phone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memoryhub.models import Fragment, ReceiptCheckpoint
from memoryhub.services import receipt_chain
from tests.browser.support import fits_a_phone, login_of, shoot, start
from tests.oauth.browser import in_browser
from tests.pages.helpers import remember, search, set_public_origin

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_checkpoints_downloads_and_erasure_in_the_browser(asgi_server, settings, live_people):
    people = live_people
    base = asgi_server.url
    set_public_origin(settings, base)
    remember(people.bruno, "My favourite tea is smoky lapsang.")
    search(people.bruno, "favourite tea")
    remember(people.cleo, "Cleo keeps her running shoes in locker nine.")

    def download(page):
        watcher = start(page, base, login_of(people.bruno), "/memory/")
        with page.expect_download() as info:
            page.click("#download-memory")
        lines = Path(info.value.path()).read_text().splitlines()
        watcher.assert_clean()
        return [json.loads(line) for line in lines], info.value.suggested_filename

    items, filename = in_browser(download)
    assert filename.startswith("memoryhub-memory-") and filename.endswith(".jsonl")
    assert [i["value"] for i in items if i["kind"] == "fragment"] == ["My favourite tea is smoky lapsang."]
    assert [i["request"]["query"] for i in items if i["kind"] == "receipt"] == ["favourite tea"]

    def administer(page):
        watcher = start(page, base, login_of(people.ada), "/workspace/receipts/")
        seen = {"key": page.inner_text("#public-key")}
        page.click("text=Sign a checkpoint now")
        page.wait_for_selector("#checkpoints")
        seen["signed"] = page.inner_text("main")
        shoot(page, "workspace-receipts")
        seen["receipts_phone"] = fits_a_phone(page)
        page.goto(f"{base}/workspace/members/")
        page.click("text=Erase cleo's memory…")
        page.wait_for_selector("#id_confirm")
        seen["erase_phone"] = fits_a_phone(page)
        shoot(page, "workspace-erase")
        page.fill("#id_confirm", "cleo")
        page.click("main form button[type=submit]")
        page.wait_for_selector("#members")
        seen["erased"] = page.inner_text("main")
        watcher.assert_clean()
        return seen

    seen = in_browser(administer)
    assert seen["key"] == receipt_chain.chain_overview(caller=people.system()).public_key
    assert "Checkpoint signed at entry 1." in seen["signed"]
    assert ReceiptCheckpoint.objects.filter(tenant=people.acme, seq=1).exists()
    assert "Erased 1 memory of cleo." in seen["erased"]
    assert seen["receipts_phone"] and seen["erase_phone"]
    assert not Fragment.objects.filter(value__contains="locker nine").exists()
    assert Fragment.objects.filter(value__contains="lapsang").exists()

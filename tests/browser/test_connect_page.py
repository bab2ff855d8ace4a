"""Connect a client, in Chromium: every snippet is there for the live server's address,
a Copy button puts its snippet on the clipboard (and selects it), and the page fits a
phone 390 px wide."""

from __future__ import annotations

import pytest

from memoryhub.pages.client_configs import client_configs
from tests.browser.support import DESKTOP, fits_a_phone, login_of, shoot, start
from tests.oauth.browser import in_browser
from tests.pages.helpers import set_public_origin

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHONE_390 = {"width": 390, "height": 844}


def test_a_person_copies_a_clients_configuration(asgi_server, settings, live_people):
    base = asgi_server.url
    set_public_origin(settings, base)
    configs = client_configs(base)
    bruno = login_of(live_people.bruno)

    def visit(page):
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
        watcher = start(page, base, bruno, "/")
        page.click("nav.site-nav a:has-text('Connect a client')")
        page.wait_for_selector("#connect-title")
        shown = {s.key: page.inner_text(f"#snippet-{s.key}") for s in configs.snippets}
        buttons = page.eval_on_selector_all("button[data-copy]", "els => els.filter(b => !b.hidden).length")
        shoot(page, "connect")

        page.click("#claude-desktop button[data-copy]")
        page.wait_for_selector("#claude-desktop button:has-text('Copied')")
        copied = page.evaluate("navigator.clipboard.readText()")
        selected = page.evaluate("window.getSelection().toString()")
        page.click("#inspector-cli button[data-copy]")
        page.wait_for_selector("#inspector-cli button:has-text('Copied')")
        copied_cli = page.evaluate("navigator.clipboard.readText()")

        page.set_viewport_size(PHONE_390)
        width = page.evaluate("document.documentElement.scrollWidth")
        shoot(page, "connect-phone")
        page.set_viewport_size(DESKTOP)
        watcher.assert_clean()
        return shown, buttons, copied, selected, copied_cli, width, fits_a_phone(page)

    shown, buttons, copied, selected, copied_cli, width, fits = in_browser(visit)
    assert shown == {s.key: s.text for s in configs.snippets}
    assert buttons == len(configs.snippets)
    assert copied == configs["claude-desktop"].text == selected
    assert f'"{base}/mcp"' in copied
    assert copied_cli == configs["inspector-cli"].text
    assert width <= PHONE_390["width"]
    assert fits


def test_without_the_clipboard_the_button_selects_the_snippet(asgi_server, settings, live_people):
    base = asgi_server.url
    set_public_origin(settings, base)
    text = client_configs(base)["vscode"].text
    bruno = login_of(live_people.bruno)

    def visit(page):
        watcher = start(page, base, bruno, "/connect/")
        # A browser that offers no clipboard to the page: the snippet is selected for Ctrl-C.
        page.evaluate("Object.defineProperty(navigator, 'clipboard', {value: undefined})")
        page.click("#vscode button[data-copy]")
        page.wait_for_selector("#vscode button:has-text('Selected')")
        selected = page.evaluate("window.getSelection().toString()")
        watcher.assert_clean()
        return selected

    assert in_browser(visit) == text

"""Chromium and a loopback redirect endpoint, for the tests that play the person."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from tests.conftest import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


class Callback:
    """The client's loopback redirect endpoint (RFC 8252): records what comes back."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/callback"
        self.received: list[str] = []
        callback = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path.startswith("/callback"):
                    callback.received.append(f"http://127.0.0.1:{callback.port}{self.path}")
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"<!doctype html><title>done</title><p>You can close this window.</p>")

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def in_browser(steps):
    """Run `steps(page)` in Chromium, on a thread of its own: Playwright's sync API
    keeps an event loop that Django's ORM refuses to share a thread with."""
    assert Path(CHROMIUM).exists(), "the browser tests need Debian's chromium at /usr/bin/chromium"

    def run():
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                return steps(page)
            finally:
                browser.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result(timeout=120)


def sign_in(page, workspace: str, username: str, password: str) -> None:
    """Fill and send the sign-in form the page is on: workspace, login name, password."""
    page.fill("#id_workspace", workspace)
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")

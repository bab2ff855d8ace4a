"""Runs build_app with the fakes in its own process: `python serve_fake.py PORT KEY_PREFIX PER_MINUTE BURST`."""

from __future__ import annotations

import sys

import uvicorn
from fakes import FakeVerifier, MemoryStore, not_found_app

from mcpapi.gateway import GatewaySettings, build_app


def main() -> None:
    port, prefix, per_minute, burst = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    settings = GatewaySettings(
        base_url=f"http://127.0.0.1:{port}",
        redis_url="redis://127.0.0.1:6379/0",
        rate_limit_key_prefix=prefix,
        rate_per_minute=per_minute,
        rate_burst=burst,
    )
    store = MemoryStore()
    app = build_app(
        verifier=FakeVerifier(),
        client_factory=store.factory,
        fallback=not_found_app,
        settings=settings,
    )
    uvicorn.run(
        app, host="127.0.0.1", port=int(port), lifespan="on", log_level="warning"
    )


if __name__ == "__main__":
    main()

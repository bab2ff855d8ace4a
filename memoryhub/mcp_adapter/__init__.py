"""The MCP adapter: the one place the memory domain and the MCP layer meet.

`mcpapi` knows nothing of Django or the domain, and the domain (models,
access, services, tasks) imports nothing from `mcpapi`. This package joins
them: it verifies tokens for the gateway (`verifier`), turns a verified
principal into a domain caller and calls one service per tool (`client`),
renders the domain's results as contract 000's outputs and applies the result
budget (`render`), serves the same client over HTTP to edge processes
(`internal_api`), and composes the ASGI application (`wiring`).
"""

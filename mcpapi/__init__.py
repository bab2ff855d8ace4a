"""The MCP endpoint: gateway (HTTP policy), server (tools), client (the way into memory).

Importable without Django configured; nothing here imports `memoryhub`.
"""

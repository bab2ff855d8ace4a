"""The contract's own data, defined once: the limits of 000/001 and which scope
each operation needs (decision 3).

Imports nothing, so both sides of the architecture may use it: the MCP layer
(`mcpapi`, which knows nothing of Django or the domain) advertises and enforces
these numbers in its schemas, and the memory domain enforces the same numbers
on every path that reaches it (web pages, REST API, commands, tasks).
"""

"""``ledger mcp-proxy``, imported only when the command runs (the MCP SDK is an extra).

The proxy (:mod:`.proxy`), the calls it records (:mod:`.calls`), the run it writes to
(:mod:`.runs`) and the JSON-RPC lines it reads (:mod:`.wire`).
"""

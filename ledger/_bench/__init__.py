"""``ledger bench``, imported only when the command runs.

The runner and its report (:mod:`.runner`), the cases and the stores they need
(:mod:`.cases`), the MCP cases (:mod:`.mcp`), the PostgreSQL cases (:mod:`.postgresql`)
and the reading commands at scale (:mod:`.reads`).
"""

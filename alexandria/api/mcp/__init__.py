"""The library as a Model Context Protocol server for agents (docs/mcp.md).

Shared by both transports: ``alexandria mcp`` (stdio, ``cli/mcp.py``, read and write tools with
the participant's key) and ``/mcp`` on ``alexandria serve`` (streamable HTTP, ``http.py``, read
tools only).  The read tools speak the library's public HTTP API through a ``source.Source`` and
check what it answers against the pinned genesis themselves.
"""

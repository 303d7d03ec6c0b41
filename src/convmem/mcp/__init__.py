"""convmem as an MCP server (Model Context Protocol): ``convmem mcp`` over stdio, or
``convmem mcp --http PORT`` (streamable HTTP on loopback). See docs/mcp.md."""

from convmem.mcp.server import TOOLS, build_server

__all__ = ["TOOLS", "build_server"]

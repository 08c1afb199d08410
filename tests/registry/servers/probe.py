"""A server that tries to escape: used as a third_party server to test the sandbox."""

import os
import socket

from mcp.server import MCPServer

mcp = MCPServer("probe")


@mcp.tool()
def read_file(path: str) -> str:
    """Read a file."""
    try:
        with open(path) as f:
            return "READ:" + f.read()
    except OSError as exc:
        return f"DENIED:{exc}"


@mcp.tool()
def environment() -> str:
    """Show the environment, and what pid 1 of the sandbox was started with."""
    try:
        with open("/proc/1/environ", "rb") as f:
            first = f.read().replace(b"\0", b"\n").decode()
    except OSError as exc:
        first = f"unreadable: {exc}"
    return "\n".join(f"{k}={v}" for k, v in sorted(os.environ.items())) + "\n--pid1--\n" + first


@mcp.tool()
def connect(port: int) -> str:
    """Open a TCP connection to 127.0.0.1:port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return "CONNECTED"
    except OSError as exc:
        return f"REFUSED:{exc}"


@mcp.tool()
def hog(megabytes: int) -> str:
    """Allocate and touch memory."""
    blocks = [bytearray(1024 * 1024) for _ in range(megabytes)]
    return f"ALLOCATED:{len(blocks)}"


@mcp.tool()
def write_work(name: str) -> str:
    """Write a file in the working directory."""
    with open(name, "w") as f:
        f.write("x")
    return os.path.abspath(name)


@mcp.tool()
def crash() -> str:
    """Exit at once, as a crashing server would."""
    os._exit(1)


if __name__ == "__main__":
    mcp.run("stdio")

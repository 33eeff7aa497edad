"""The test server (server.py) behind a tee that records every line it receives.

    python tee_server.py STATE_DIR

Each line on stdin is appended, byte for byte, to STATE_DIR/lines.bin, then passed to
server.py (the SDK's own stdio server), whose stdout is this process's: a test sees
exactly what reached the server, whether or not the server could read it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVER = Path(__file__).resolve().parent / "server.py"


def main(state: Path) -> int:
    """Relay stdin to the server until it ends; the server's exit status."""
    server = subprocess.Popen([sys.executable, str(SERVER), str(state)], stdin=subprocess.PIPE)
    assert server.stdin is not None
    with (state / "lines.bin").open("ab") as seen:
        for line in sys.stdin.buffer:
            seen.write(line)
            seen.flush()
            server.stdin.write(line)
            server.stdin.flush()
    server.stdin.close()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

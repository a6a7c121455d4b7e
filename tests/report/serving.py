"""Waiting for a Datasette server the serve tests started (``ledger serve`` or its command line)."""

from __future__ import annotations

import subprocess
import time
import urllib.request


def wait_until_answering(base: str, server: subprocess.Popen, what: str, limit_s: float = 60) -> None:
    """Return once ``base`` answers; fail if ``server`` exits first or ``limit_s`` passes."""
    deadline = time.monotonic() + limit_s
    while True:
        assert server.poll() is None, server.stdout.read() if server.stdout else f"{what} exited"
        try:
            urllib.request.urlopen(base + "/-/versions.json", timeout=2).read()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{what} did not answer within {limit_s:.0f} s"
            time.sleep(0.3)


def stop(server: subprocess.Popen) -> None:
    """Terminate a server the test started, killing it if it does not end within 20 s."""
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()

"""A port for a test's server: free now, and from below the kernel's ephemeral range, so that no
outgoing connection (Ray's, a browser's) can take it before the server binds it seconds later."""
from __future__ import annotations

import random
import socket


def free_port() -> int:
    draw = random.SystemRandom()  # not the seeded RNG: tests seed it alike
    for _ in range(200):
        port = draw.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32767")

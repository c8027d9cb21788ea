"""Small network helpers shared by whatever the project listens on (docs/security.md)."""
from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1, [::1]); False for a host
    name, "" or a wildcard (all interfaces)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False

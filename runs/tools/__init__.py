"""Tools agents can call: safe built-ins and teams' webhook tools (see registry.py)."""

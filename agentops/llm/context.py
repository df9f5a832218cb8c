"""Context windows of the models, and a cheap token estimate to know when a
conversation nears its model's window."""

from __future__ import annotations

import json

# Tokens a model accepts, by name prefix (longest prefix wins). Unknown models get the default.
CONTEXT_WINDOWS = {
    "mistral-large": 128_000,
    "mistral-medium": 128_000,
    "mistral-small": 128_000,
    "magistral": 128_000,
    "codestral": 256_000,
    "ministral": 128_000,
    "open-mistral-nemo": 128_000,
    "pixtral": 128_000,
    "offline": 8_000,
}
DEFAULT_CONTEXT_WINDOW = 32_000


def context_window(model: str) -> int:
    matches = [prefix for prefix in CONTEXT_WINDOWS if model.startswith(prefix)]
    return CONTEXT_WINDOWS[max(matches, key=len)] if matches else DEFAULT_CONTEXT_WINDOW


def estimate_tokens(messages: list[dict]) -> int:
    """About four characters a token: enough to decide when to compact, not to bill."""
    return sum(len(json.dumps(message, default=str)) for message in messages) // 4 + 4 * len(messages)

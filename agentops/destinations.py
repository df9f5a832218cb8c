"""A stored credential is bound to where it is sent.

A token, key or signing secret is saved together with the address it goes to (a
Kubernetes API server, a Hub endpoint, a Ray dashboard, a provider's base URL, a webhook
URL). Changing that address, or turning off the TLS check on the way to it, sends the
stored credential somewhere it was never meant for: to a server the editor controls, say.
So such a change must come with the credential in the same request; otherwise the change
is refused (400), and the stored credential is never sent to the new place. Every update
of a row holding a credential beside an address calls ``check_credential_destination``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentops.errors import InvalidRequest


@dataclass(frozen=True)
class Destination:
    """Where a credential goes: ``addresses`` (setting name -> its value, e.g. ``{"host":
    "https://k8s.example.com"}``) and ``checks`` (setting name -> whether a check on the
    way is on, e.g. ``{"verify_ssl": True}``)."""

    addresses: Mapping[str, object] = field(default_factory=dict)
    checks: Mapping[str, bool] = field(default_factory=dict)

    def changes_to(self, other: Destination) -> list[str]:
        """The settings that make ``other`` another destination than this one: an
        address that differs, or a check turned off (turning one on is only safer)."""
        changed = [name for name in other.addresses if self.addresses.get(name) != other.addresses[name]]
        changed += [name for name, on in self.checks.items() if on and not other.checks.get(name, True)]
        return changed


def check_credential_destination(
    *,
    before: Destination,
    after: Destination,
    stored: bool,
    supplied: bool,
    credential: str,
) -> None:
    """Refuse moving a ``stored`` credential to another destination unless the request
    ``supplied`` it again; ``credential`` names it for the message, e.g. "the token
    (credentials.token)"."""
    if not stored or supplied:
        return
    changed = before.changes_to(after)
    if not changed:
        return
    described = " and ".join(f"turning off {name}" if name in before.checks else f"changing {name}" for name in changed)
    raise InvalidRequest(
        f"{described} requires re-entering {credential} in the same request: "
        "a stored credential is never sent to a new destination"
    )

"""agentops/destinations.py: a stored credential never moves to another destination
unless the same request gives it again."""

import pytest

from agentops.destinations import Destination, check_credential_destination
from agentops.errors import InvalidRequest

SERVER = Destination(addresses={"host": "https://a.example"}, checks={"verify_ssl": True})


def _check(after, *, stored=True, supplied=False):
    check_credential_destination(before=SERVER, after=after, stored=stored, supplied=supplied, credential="the token")


@pytest.mark.parametrize(
    ("after", "message"),
    [
        (Destination(addresses={"host": "https://b.example"}, checks={"verify_ssl": True}), "changing host"),
        (Destination(addresses={"host": "https://a.example"}, checks={"verify_ssl": False}), "turning off verify_ssl"),
        (
            Destination(addresses={"host": "https://b.example"}, checks={"verify_ssl": False}),
            "changing host and turning off verify_ssl",
        ),
    ],
)
def test_a_new_destination_without_the_credential_is_refused(after, message):
    with pytest.raises(InvalidRequest, match=f"^{message} requires re-entering the token in the same request"):
        _check(after)
    _check(after, supplied=True)  # given again: allowed
    _check(after, stored=False)  # nothing saved to move: allowed


def test_the_same_destination_or_a_check_turned_on_keeps_the_credential():
    _check(Destination(addresses={"host": "https://a.example"}, checks={"verify_ssl": True}))
    insecure = Destination(addresses={"host": "https://a.example"}, checks={"verify_ssl": False})
    check_credential_destination(before=insecure, after=SERVER, stored=True, supplied=False, credential="the token")

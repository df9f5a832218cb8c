"""Which provider serves a model (agentops/llm/providers.py)."""

import threading

from agentops.llm.providers import _mistral, mistral_client


def test_threads_starting_at_once_share_one_client_per_key_and_server():
    """A worker's threads all asking for the client at start-up get the same one: the
    SDK's client (with its TLS contexts) is built once per process, not once per thread."""
    _mistral.cache_clear()
    start = threading.Barrier(8)
    clients = []

    def ask():
        start.wait()
        clients.append(mistral_client("sk-one", "http://127.0.0.1:9", 1000))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(clients) == 8 and len({id(client) for client in clients}) == 1
    assert mistral_client("sk-two", "http://127.0.0.1:9", 1000) is not clients[0]

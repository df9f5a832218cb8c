"""Every test's live pages start with a channel layer no earlier test's event loop has
touched (``_channel_layer_of_this_test`` in tests/conftest.py).

The two tests run in this order (pytest keeps a file's order): the first leaves the
process's layer as channels_redis does when a consumer is cancelled while waiting for
the lock its receivers share; the second has two consumers receive at once on the
layer it gets, which with the first test's layer fails with "bound to a different
event loop"."""

import asyncio

from channels.layers import get_channel_layer


async def test_a_consumer_cancelled_while_waiting_leaves_the_layers_lock_behind():
    layer = get_channel_layer()
    key = layer.prefix + layer.non_local_name(await layer.new_channel())
    await layer.receive_clean_locks.acquire(key)  # a receiver's cleaner holds it
    waiting = asyncio.ensure_future(layer.receive_clean_locks.acquire(key))  # the next receiver
    await asyncio.sleep(0.01)
    waiting.cancel()  # its consumer disconnects
    await asyncio.gather(waiting, return_exceptions=True)
    layer.receive_clean_locks.release(key)
    assert key in layer.receive_clean_locks.locks, "channels_redis keeps the lock, bound to this loop"


async def test_the_next_test_receives_on_two_channels_at_once():
    layer = get_channel_layer()
    first, second = await layer.new_channel(), await layer.new_channel()
    receiving = [asyncio.ensure_future(layer.receive(first)), asyncio.ensure_future(layer.receive(second))]
    await asyncio.sleep(0.1)  # both wait: one holds the receive lock, the other waits for it
    await layer.send(first, {"type": "one"})
    await layer.send(second, {"type": "two"})
    received = await asyncio.wait_for(asyncio.gather(*receiving), timeout=30)
    assert [message["type"] for message in received] == ["one", "two"]

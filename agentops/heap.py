"""The cyclic garbage collector of long-running processes (web and Celery workers),
settled once their code is loaded.

Everything a process loads at start-up (Django, the apps, their libraries: about
235,000 objects in a web process, more in a worker) lives as long as the process. Left
where it is, every collection of the oldest generation walks all of it again while
requests and tasks allocate: on the 2-core machine of issue 19 one such collection of
a web process took 0.3 s, and OTLP requests triggered one every twenty or so.
``settle_heap()`` moves it to the collector's permanent generation (``gc.freeze``) and
collects the young generation after 10,000 net allocations instead of 700: one
512-span request builds tens of thousands of short-lived dicts and
lists. Cycles among the frozen objects are never collected; start-up builds none that
die. docs/performance.md has the figures.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def settle_heap() -> None:
    """Collect what start-up left behind, freeze the rest, and collect the young
    generation less often. Called when a process has loaded its code: before a Celery
    pool forks its children (which then share the frozen pages instead of copying them
    when the collector would write to them) and at the end of the ASGI app's import."""
    gc.collect()
    gc.freeze()
    _, *older = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, *older)

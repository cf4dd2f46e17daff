"""What the benchmarks share: time one call, with the device synchronised before and after it."""

import time


def timed(fn, sync) -> float:
    """Seconds that fn() takes; `sync` waits for queued device work (a no-op on the CPU)."""
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start

"""What the benchmarks share: time one call, with the device synchronised before and after it, and
the command-line arguments each of them takes, checked as the package's command line checks its own."""

import argparse
import time

import torch


def timed(fn, sync) -> float:
    """Seconds that fn() takes; `sync` waits for queued device work (a no-op on the CPU)."""
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def sync_for(device: torch.device):
    """What waits for the work queued on `device`: a GPU's kernels run after the Python call that
    launched them returns (CUDA's and Apple's MPS alike), the CPU's do not."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None


def device_argument(text: str) -> torch.device:
    """--device: a device this machine has and the package runs on (meta, which holds shapes but does no
    arithmetic, timed nothing; cuda without a GPU was an AssertionError)."""
    from transformer.memory import check_device

    try:
        return check_device(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None

"""Shared test fixtures: where the real corpora are, and a quiet torch."""
import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

# The models under test are tiny: one thread is faster than two fighting over a small matmul, and it
# makes float reductions independent of the machine's core count.
torch.set_num_threads(1)
# The notebooks' kernels inherit this: with the suite split over two workers (pytest-xdist), two kernels
# of two threads each on two cores would slow each other down many times over.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The course's local copy of the corpora (`../shared/data`); tests that need it skip without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"corpora not found at {SHARED_DATA}")
    return SHARED_DATA


def pytest_collection_modifyitems(config, items):
    """Start the longest items first: the portability re-runs (`test_portable_outputs.py`, a whole
    notebook each, longest first). A stable sort, so every notebook's cells keep their order and every
    test module (pytest-xdist's `--dist loadscope` unit of work) stays together."""
    items.sort(key=lambda item: "test_portable_outputs.py" not in item.nodeid)

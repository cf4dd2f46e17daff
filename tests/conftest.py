"""Shared test fixtures: where the real corpora are, and a quiet torch."""
import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The course's local copy of the corpora (`../shared/data`); tests that need it skip without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"corpora not found at {SHARED_DATA}")
    return SHARED_DATA

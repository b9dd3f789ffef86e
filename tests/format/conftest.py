"""Fixtures of the container tests."""

from __future__ import annotations

import pytest

from _container_helpers import write_mixed


@pytest.fixture
def mixed_file(tmp_path):
    """(path, tensors) of a small container holding every codec path and an alias."""
    path = tmp_path / "mixed.wcodec"
    tensors = write_mixed(path)
    return path, tensors

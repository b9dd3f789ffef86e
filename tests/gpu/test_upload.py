"""gpu.loader.upload: host arrays (read-only file views included) copied into device slices, in
pinned, pipelined batches on CUDA (the pieces cross staging-buffer boundaries), directly on the
CPU; sizes must match."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from wcodec.gpu import loader  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_upload_copies_every_byte(device, monkeypatch):
    monkeypatch.setattr(loader, "UPLOAD_STAGE_BYTES", 1000)  # many batches, both staging buffers
    monkeypatch.setattr(loader, "UPLOAD_PIECE_BYTES", 300)
    monkeypatch.setattr(loader, "UPLOAD_DIRECT_BYTES", 0)
    rng = np.random.default_rng(0)
    srcs = [rng.integers(0, 256, n, dtype=np.uint8) for n in (1, 299, 300, 301, 2500, 0, 777)]
    srcs.append(rng.integers(0, 1 << 30, 100, dtype=np.int32))  # other dtypes: their bytes
    for a in srcs:
        a.flags.writeable = False  # as the file's memory map gives them
    out = torch.zeros(sum(a.nbytes for a in srcs) + 16, dtype=torch.uint8, device=device)
    offs = np.cumsum([0] + [a.nbytes for a in srcs]).tolist()
    loader.upload([(a, out[o:o + a.nbytes]) for a, o in zip(srcs, offs)], device)
    want = np.concatenate([a.view(np.uint8) for a in srcs])
    assert np.array_equal(out[:offs[-1]].cpu().numpy(), want) and not out[offs[-1]:].any()


def test_upload_refuses_a_size_mismatch():
    with pytest.raises(ValueError, match="5-byte source for a 4-byte"):
        loader.upload([(np.zeros(5, np.uint8), torch.zeros(4, dtype=torch.uint8))])

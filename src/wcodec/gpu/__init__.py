"""GPU decoding of wcodec records with Triton (one batched launch per kernel over many tensors).

Light to import: torch and triton load only when a function here is called.

- :func:`decode_records` (``wcodec.gpu.decode``): records -> tensors on a device, one batch.
- :func:`load_records` (``wcodec.gpu.loader``): the pipelined loader (pinned buffers, streams,
  checksums), with a CPU fallback when no GPU is present.
- :class:`GPUDecoder` (``wcodec.gpu.api``): the seed's ``GPUDecoder(use_gpu=True).decode_layer(rec)``.
"""

from __future__ import annotations


def decode_records(items, device="cuda", config=None):
    """See :func:`wcodec.gpu.decode.decode_records`."""
    from .decode import decode_records as f
    return f(items, device, config)


def load_records(items, device="cuda", separate=False, **kwargs):
    """See :func:`wcodec.gpu.loader.load_records`."""
    from .loader import load_records as f
    return f(items, device, separate=separate, **kwargs)


def __getattr__(name):
    if name == "GPUDecoder":  # the seed's name (wcodec.gpu.api); imports torch on first use
        from .api import GPUDecoder
        return GPUDecoder
    raise AttributeError(f"module 'wcodec.gpu' has no attribute {name!r}")


def triton_available() -> bool:
    """True when triton imports (the kernels can run, on a GPU or under TRITON_INTERPRET=1)."""
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


__all__ = ["decode_records", "load_records", "triton_available", "GPUDecoder"]

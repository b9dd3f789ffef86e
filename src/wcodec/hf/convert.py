"""Hugging Face folder conversion: every weight shard through the container API, side files
copied, and the codec recorded in config.json as a ``quantization_config`` block.

Why ``quantization_config``: it is where transformers and the Hub look to tell how a
checkpoint's weights are stored. transformers (checked with 5.23) keeps an unknown
``quant_method`` as a plain dict: ``AutoConfig.from_pretrained`` works, and
``AutoModel*.from_pretrained`` logs "Unknown quantization type, got wcodec ... we will skip the
quantization" (then fails for want of safetensors weights, as it should: load with
:class:`wcodec.hf.WCodecModel`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

QUANT_METHOD = "wcodec"


def codec_config(mode: str) -> dict:
    """The ``quantization_config`` block written into config.json for a folder encoded in ``mode``."""
    import wcodec
    from ..format import FORMAT_VERSION

    return {"quant_method": QUANT_METHOD, "format_version": int(FORMAT_VERSION), "mode": mode,
            "wcodec_version": wcodec.__version__}


def _read_config(folder) -> dict | None:
    """A folder's config.json as a dict, None when absent. Raises FormatError when it is not a
    regular file holding a JSON object (checked before any weight is written)."""
    from ..errors import FormatError
    from ..format import _io

    p = Path(folder) / "config.json"
    if not p.exists():
        return None
    cfg = _io.read_json(p, "config.json")
    if not isinstance(cfg, dict):
        raise FormatError(f"{p}: config.json must hold a JSON object, got {type(cfg).__name__}")
    return cfg


def read_codec_config(folder) -> dict | None:
    """The wcodec ``quantization_config`` of a folder's config.json, or None when absent or another method.

    Raises FormatError when config.json is not a JSON object."""
    cfg = _read_config(folder)
    q = cfg.get("quantization_config") if cfg is not None else None
    return q if isinstance(q, dict) and q.get("quant_method") == QUANT_METHOD else None


def _record_codec(dst: Path, mode: str) -> Path | None:
    """Add the codec block to dst/config.json (atomically, unique temporary name); None when
    the folder has no config.json."""
    from ..format import _io

    cfg = _read_config(dst)
    if cfg is None:
        return None
    p = dst / "config.json"
    cfg["quantization_config"] = codec_config(mode)
    _io.clean_stale_temps(dst, p.name)
    tmp = _io.temp_path(p)
    try:
        tmp.write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p


def convert_folder(src, dst, mode: str = "lossless", workers: int | None = None,
                   max_shard_size: int | None = None, progress: bool = False,
                   codec: str | None = None, qp: float | None = None,
                   target_snr_db: float | None = None, plan: dict | None = None,
                   metadata: dict | None = None, low_joint: bool = False) -> list[Path]:
    """Convert a Hugging Face model folder (sharded or not; a sentence-transformers folder too).

    src: folder with safetensors (or torch .bin) weights. dst: output folder; receives
    ``model.wcodec`` (or shards + ``model.wcodec.index.json``), copies of every non-weight file
    (config, tokenizer, generation config, sub-folders such as ``1_Pooling``), and config.json
    gains ``quantization_config = {"quant_method": "wcodec", "format_version", "mode",
    "wcodec_version"}``. mode: "lossless", "int8" or "lossy" with qp= or target_snr_db= (as in
    :func:`wcodec.save_file`). codec: ``"fixed"`` for the fixed-rate layout of BF16 weights;
    low_joint: F32 low bytes as one plane where smaller (both as :func:`wcodec.save_file`). plan,
    metadata: as :func:`wcodec.encode_safetensors_to_wcodec` (per-tensor settings; config.json then records
    mode ``"lossy:per-tensor"``). Returns the written paths.
    Raises FileNotFoundError (no weights), WcodecError subclasses (bad input), OSError.
    """
    from ..api import encode_safetensors_to_wcodec
    from ..encodeopts import mode_of

    src, dst = Path(src), Path(dst)
    mode = mode_of(mode, qp, target_snr_db, codec)  # InvalidInputError before any work
    if not src.is_dir():
        raise NotADirectoryError(f"{src}: convert_folder takes a model folder")
    _read_config(src)  # a malformed config.json fails here, before any weight is written
    paths = encode_safetensors_to_wcodec(src, dst, mode=mode, workers=workers,
                                         max_shard_size=max_shard_size, progress=progress,
                                         codec=codec, plan=plan, metadata=metadata, low_joint=low_joint)
    _record_codec(dst, mode if plan is None else "lossy:per-tensor")
    return paths

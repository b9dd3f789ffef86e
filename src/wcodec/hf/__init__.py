"""Hugging Face integration: folder conversion and ``WCodecModel.from_pretrained``.

Imported only on use; needs torch and transformers (sentence-transformers for
:func:`load_sentence_transformer`).

- :func:`convert_folder`: a model folder -> .wcodec shards + side files + codec in config.json.
- :class:`WCodecModel`: ``from_pretrained(folder, device, dtype, keep_compressed, model_class)``.
- :func:`load_sentence_transformer`: the same for a sentence-transformers folder.
- Plain ``transformers.AutoModel*.from_pretrained(folder)`` / ``SentenceTransformer(folder)`` /
  pipelines after ``import wcodec`` (:mod:`wcodec.hf.quantizer`, registered by :mod:`wcodec.hf.hook`);
  options as ``quantization_config=WcodecConfig(keep_compressed=True)``.
"""

from __future__ import annotations

from .convert import codec_config, convert_folder, read_codec_config


def __getattr__(name):
    # torch / transformers load only when a model is built, not for folder conversion
    if name in ("WCodecModel", "WcodecConfig", "load_sentence_transformer"):
        import importlib.util

        for dep, extra in (("torch", "torch"), ("transformers", "hf")):
            if importlib.util.find_spec(dep) is None:
                from ..errors import MissingDependencyError
                raise MissingDependencyError(f"wcodec.hf.{name} needs {dep}, which is not installed: "
                                             f"pip install 'wcodec[{extra}]'")
    if name == "WCodecModel":
        from .model import WCodecModel
        return WCodecModel
    if name == "WcodecConfig":
        from .quantizer import WcodecConfig
        return WcodecConfig
    if name == "load_sentence_transformer":
        from .sentence import load_sentence_transformer
        return load_sentence_transformer
    raise AttributeError(f"module 'wcodec.hf' has no attribute {name!r}")


__all__ = ["convert_folder", "codec_config", "read_codec_config", "WCodecModel", "load_sentence_transformer",
           "WcodecConfig"]

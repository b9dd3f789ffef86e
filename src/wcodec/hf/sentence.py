"""A sentence-transformers model from a converted folder (modules.json, 1_Pooling/, ...).

sentence-transformers always loads its Transformer module through
``AutoModel.from_pretrained(folder)``, which finds no safetensors in a converted folder. So the
HF model is built first with :meth:`WCodecModel.from_pretrained` and handed to the Transformer
module by replacing its ``_load_model`` for the duration of the constructor (the one place
sentence-transformers creates the model; it returns the model in v6 and sets ``auto_model``
before). The other modules (pooling, normalize) load from the folder as usual.
"""

from __future__ import annotations

from contextlib import contextmanager


def _transformer_module_class():
    try:  # sentence-transformers >= 6
        from sentence_transformers.base.modules.transformer import Transformer
    except ImportError:  # earlier releases
        from sentence_transformers.models import Transformer
    return Transformer


@contextmanager
def _provide_model(model):
    cls = _transformer_module_class()
    original = cls._load_model

    def _load_model(self, *args, **kwargs):
        if not isinstance(type(self).__dict__.get("auto_model"), property):
            self.auto_model = model  # releases before 6 keep it there and return None
        return model

    cls._load_model = _load_model
    try:
        yield
    finally:
        cls._load_model = original


def load_sentence_transformer(folder, device="cpu", dtype=None, keep_compressed: bool = False,
                              torch_dtype=None, **kwargs):
    """Build a ``SentenceTransformer`` from a folder written by :func:`wcodec.hf.convert_folder`.

    folder: a converted sentence-transformers folder (modules.json; the Transformer module at its
    root). device / dtype (or torch_dtype) / keep_compressed and the remaining kwargs (offload, decoder,
    verify) as :meth:`wcodec.hf.WCodecModel.from_pretrained`; the HF model class is AutoModel.
    Returns the SentenceTransformer on ``device`` in eval mode. Needs sentence-transformers;
    run with HF_HUB_OFFLINE=1 where there is no network (the folder is local anyway).
    """
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    from .model import WCodecModel

    model = WCodecModel.from_pretrained(folder, device=device, dtype=dtype, torch_dtype=torch_dtype,
                                        keep_compressed=keep_compressed, model_class=AutoModel, **kwargs)
    with _provide_model(model):
        st = SentenceTransformer(str(folder), device=str(device))
    return st.eval()

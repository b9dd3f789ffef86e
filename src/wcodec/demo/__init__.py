"""The ``wcodec demo``: a tiny Llama (stories260K, shipped in ``data/``) compressed, decoded and run.

Modules: :mod:`.llama2c` (llama2.c checkpoint reader, Hugging Face export), :mod:`.tokenizer`
(llama2.c BPE), :mod:`.model` (numpy Llama forward pass and generation), :mod:`.run` (the demo).
Nothing here is imported by ``import wcodec``.
"""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
MODEL_PATH = DATA_DIR / "stories260K.bin"
TOKENIZER_PATH = DATA_DIR / "tok512.bin"

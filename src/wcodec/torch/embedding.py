"""CompressedEmbedding: an nn.Embedding whose bf16 table stays in the fixed-rate layout on the
device (about 12 bits/weight); a lookup decodes only the rows it returns (``wcodec.gpu.fixed.
embedding``). The lookup is a ``torch.library`` custom op, so ``torch.compile`` and CUDA graphs
see one op and no graph break. The table is frozen.
"""

from __future__ import annotations

import torch
from torch import nn

from ..gpu import fixed as fx
from .linear import FixedBuffers


@torch.library.custom_op("wcodec::fixed_embedding", mutates_args=())
def _fixed_embedding(idx: torch.Tensor, packed: torch.Tensor, base: int, n: int, k: int) -> torch.Tensor:
    return fx.embedding(idx, fx.unpack(packed, base, n, k))


@_fixed_embedding.register_fake
def _(idx, packed, base, n, k):
    return idx.new_empty((*idx.shape, k), dtype=torch.bfloat16)


class CompressedEmbedding(FixedBuffers):
    """``weight[input]`` with the table (weight: [num_embeddings, embedding_dim] bfloat16) kept in
    the fixed-rate layout; bit-exact rows.

    input: integer tensor of any shape on the table's device; returns [*input.shape, embedding_dim]
    bfloat16 (``weight_dtype``: the dtype a ``.to(dtype)`` cast the module to). ``padding_idx`` is
    kept for reference (the table is frozen, so it changes nothing). On CUDA an index outside [0,
    num_embeddings) returns a row of zeros (no device assert and no host sync); on the CPU it raises
    IndexError as nn.Embedding does.
    ``.weight``: the table as a FixedWeightTensor, as CompressedLinear's (metadata free, any op
    decodes the whole table); ``num_embeddings``, ``embedding_dim``, ``padding_idx`` and
    nn.Embedding's options (all off) are there for code that reads them.
    """

    #: nn.Embedding's options, read by code that inspects embeddings (peft's LoRA, resizing):
    #: a compressed table has none of them
    max_norm = None
    norm_type = 2.0
    scale_grad_by_freq = False
    sparse = False

    def __init__(self, fw: fx.FixedWeight, padding_idx: int | None = None):
        super().__init__()
        self._register_fixed(fw)
        self.num_embeddings = fw.N
        self.embedding_dim = fw.K
        self.padding_idx = padding_idx

    @classmethod
    def from_embedding(cls, embedding: nn.Embedding) -> "CompressedEmbedding":
        """A CompressedEmbedding returning what ``embedding`` (bfloat16 table, no max_norm)
        returns. Raises UnsupportedError for another dtype, ValueError for max_norm (it renormalises
        the table in place, which a frozen compressed table cannot do)."""
        if embedding.max_norm is not None:
            raise ValueError("an embedding with max_norm rewrites its table: it cannot stay compressed")
        return cls(fx.encode_weight(embedding.weight.detach()), embedding.padding_idx)

    def decoded_weight(self) -> torch.Tensor:
        """The table, bit-exact: [num_embeddings, embedding_dim] bfloat16 (a new tensor)."""
        return fx.decode(self.fixed_weight)

    def get_extra_state(self) -> dict:
        n, k = self._shape()
        return {"base": self.base, "num_embeddings": n, "embedding_dim": k}

    #: (start, stop): the table holds rows [start, stop) of a vocabulary split across
    #: tensor-parallel ranks (None: the whole table); see :meth:`forward`
    vocab_range = None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.vocab_range is None:
            return self._lookup(input)
        # a vocabulary-parallel shard (Megatron-LM's VocabParallelEmbedding, Shoeybi et al. 2019;
        # DTensor's MaskPartial for transformers' "embedding_rowwise"): ids of other ranks' rows
        # give zeros, and the ranks' lookups summed are the whole table's
        start, stop = self.vocab_range
        outside = (input < start) | (input >= stop)
        rows = self._lookup((input - start).masked_fill(outside, 0))
        return rows.masked_fill(outside.unsqueeze(-1), 0)

    def _lookup(self, input: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():  # eager: skip the custom op's dispatch cost
            rows = fx.embedding(input, self.fixed_weight)
        else:
            rows = _fixed_embedding(input, self.w_packed, self.base, self._n, self._k)
        return rows.to(self.weight_dtype)  # a module cast by .to(dtype): the rows as the cast table holds them

    def extra_repr(self) -> str:
        return (f"{self._n}, {self._k}, padding_idx={self.padding_idx}, "
                f"bits/weight={self.fixed_weight.bits_per_weight:.2f}")

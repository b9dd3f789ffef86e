"""llama2.c's BPE tokenizer (``tok512.bin``), encoding and decoding exactly as its run.c does.

File format: int32 max_token_length, then per token: float32 merge score, int32 byte length, the
token's bytes. Tokens 3..258 are the byte fallbacks ``<0x00>``..``<0xFF>``.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from . import TOKENIZER_PATH

BOS, EOS = 1, 2
_BYTE_TOKEN = re.compile(rb"<0x([0-9A-Fa-f]{2})>")
_BYTE_OFFSET = 3  # id of <0x00>: unknown UTF-8 sequences fall back to one token per byte


class Tokenizer:
    """vocab: list of token byte strings; scores: merge priority per token (higher merges first)."""

    def __init__(self, vocab: list[bytes], scores: list[float], max_token_length: int):
        self.vocab, self.scores, self.max_token_length = vocab, scores, max_token_length
        self._ids: dict[bytes, int] = {}
        for i, piece in enumerate(vocab):
            self._ids.setdefault(piece, i)  # first wins, like a lookup that stops at a match

    @classmethod
    def load(cls, path: str | Path = TOKENIZER_PATH) -> "Tokenizer":
        buf = Path(path).read_bytes()
        (max_len,), pos = struct.unpack_from("<i", buf, 0), 4
        vocab, scores = [], []
        while pos < len(buf):
            score, n = struct.unpack_from("<fi", buf, pos)
            pos += 8
            if n < 0 or pos + n > len(buf):
                raise ValueError(f"{path}: token {len(vocab)} runs past the end of the file")
            vocab.append(buf[pos:pos + n])
            scores.append(score)
            pos += n
        return cls(vocab, scores, max_len)

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]:
        """Token ids of text: optional BOS, the dummy-prefix space (non-empty text only), then
        code points (or byte fallbacks) merged greedily by best pair score, as run.c encode()."""
        tokens = [BOS] if bos else []
        if text:
            tokens.append(self._ids[b" "])
        for ch in text:
            piece = ch.encode("utf-8")
            tok = self._ids.get(piece)
            tokens.extend([tok] if tok is not None else [b + _BYTE_OFFSET for b in piece])
        # Merge the adjacent pair whose concatenation is the best-scored token, until none is.
        # BOS takes part like any token, as in run.c (its piece never forms a merge).
        while True:
            best_score, best_id, best_idx = -1e10, -1, -1
            for i in range(len(tokens) - 1):
                merged = self._ids.get(self.vocab[tokens[i]] + self.vocab[tokens[i + 1]])
                if merged is not None and self.scores[merged] > best_score:
                    best_score, best_id, best_idx = self.scores[merged], merged, i
            if best_idx < 0:
                break
            tokens[best_idx:best_idx + 2] = [best_id]
        return tokens + [EOS] if eos else tokens

    def piece(self, prev: int, token: int) -> bytes:
        """Bytes of token following prev: the space after BOS is dropped, <0xXX> is one byte."""
        piece = self.vocab[token]
        if prev == BOS and piece.startswith(b" "):
            piece = piece[1:]
        m = _BYTE_TOKEN.fullmatch(piece)
        return bytes([int(m.group(1), 16)]) if m else piece

    def decode(self, ids: list[int]) -> str:
        """Text of a token sequence (BOS/EOS print nothing); bad UTF-8 becomes U+FFFD."""
        out, prev = bytearray(), -1
        for tok in ids:
            if tok not in (BOS, EOS):
                out += self.piece(prev, tok)
            prev = tok
        return out.decode("utf-8", errors="replace")

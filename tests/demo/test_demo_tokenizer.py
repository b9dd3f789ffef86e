"""llama2.c's BPE tokenizer (tok512.bin): run.c's encoding, decoding and round trips."""

from __future__ import annotations

import pytest

from wcodec.demo.tokenizer import BOS, EOS, Tokenizer


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def test_vocab(tok):
    assert len(tok) == 512 and tok.max_token_length == 7
    assert tok.vocab[3] == b"<0x00>" and tok.vocab[258] == b"<0xFF>"


def test_known_encoding(tok):
    # BOS, then the dummy-prefix space merged into " Once", " upon", " a", " time"
    assert tok.encode("Once upon a time") == [BOS, 403, 407, 261, 378]
    assert tok.encode("") == [BOS]
    assert tok.encode("", bos=False, eos=True) == [EOS]


@pytest.mark.parametrize("text", [
    "Once upon a time, there was a little girl named Lily.",
    "Tom said: \"Let's go!\"\nThey ran to the park.",
    "héllo wörld 😀 ¿qué? 日本",  # code points not in the vocab fall back to bytes
    "  two  spaces\t tab",
    "x",
])
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert ids[0] == BOS and all(0 <= i < len(tok) for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode(text, bos=False)) == " " + text  # the space is dropped after BOS only


def test_byte_fallback_and_pieces(tok):
    ids = tok.encode("😀", bos=False)
    assert 3 <= ids[-1] <= 258  # a byte token
    assert tok.piece(0, 13) == b"\n"  # <0x0A>
    assert tok.piece(BOS, tok.encode("a", bos=False)[0]) == b"a"

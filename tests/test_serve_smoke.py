"""benchmarks/serve.py on the CPU, in this process (its --smoke starts three Python processes,
too slow for the suite): transformers' continuous-batching engine serves a tiny bf16 Llama and
the same model with CompressedLinear layers through serve.serve(); every request gets its forced
token count, both give the same greedy tokens, and the table prints a row per variant."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SERVE = Path(__file__).resolve().parents[1] / "benchmarks" / "serve.py"


@pytest.fixture(scope="module")
def serve_mod():
    spec = importlib.util.spec_from_file_location("serve_bench", SERVE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(mod, model, reqs):
    gc = transformers.GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=8)
    got = {}
    with torch.inference_mode(), model.continuous_batching_context_manager(
            generation_config=gc, continuous_batching_config=mod.engine_config("eager", small=True),
            warmup=False) as manager:
        got["stats"] = mod.serve(manager, reqs, poll_active=True)
        # the tokens themselves, for the bf16 / compressed comparison
        rid = manager.add_request(reqs[0][0], max_new_tokens=reqs[0][1], eos_token_id=-1)
        while True:
            r = manager.get_result(request_id=rid, timeout=5)
            if r is None or r.is_finished():
                break
        got["tokens"] = r.generated_tokens
    return got


def test_serve_bf16_and_compressed_on_cpu(serve_mod):
    from wcodec.torch.linear import compress_model

    cfg = serve_mod.model_config("7b", None, smoke=True)
    cfg.num_hidden_layers = 1
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    reqs = serve_mod.requests(3, 0, cfg.vocab_size, prompt=(4, 9), output=(2, 5))
    assert reqs == serve_mod.requests(3, 0, cfg.vocab_size, prompt=(4, 9), output=(2, 5))  # seeded
    dense = _run(serve_mod, model, reqs)
    assert compress_model(model)["replaced"]
    fused = _run(serve_mod, model, reqs)
    for got in (dense, fused):
        s = got["stats"]
        assert s["requests"] == 3 and s["tokens"] == sum(n for _, n in reqs)
        assert s["tok_s"] > 0 and s["ttft_ms_median"] > 0 and 1 <= s["max_active"] <= 3
    assert fused["tokens"] == dense["tokens"] and len(dense["tokens"]) == reqs[0][1]


def test_table_rows_and_ratios(serve_mod):
    args = serve_mod.argparse.Namespace(model="7b", layers=2, smoke=True, concurrency="1", budget_gb=24,
                                        prompt_min=8, prompt_max=16, output_min=4, output_max=8)
    run = lambda tok: {"weights_gb": 1.0, "load_s": 2.0, "c1": {"tok_s": tok, "ttft_ms_median": 5, "tpot_ms_median": 1},
                       "saturation": {"tok_s": tok, "max_active": 3}, "cache_tokens": 100}  # noqa: E731
    results = {("auto", "bf16"): [run(100.0)], ("auto", "fused"): [run(125.0), {"error": "boom"}]}
    lines = serve_mod.table(args, results, "CPU")
    fused = next(ln for ln in lines if "| fused |" in ln)
    assert fused.count("(1.250x)") == 2 and "1 ok (c1 tok/s: 125), 1 failed: boom" in fused

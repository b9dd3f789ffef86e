"""LoRA adapters (peft) trained on a compressed base: stories260K as a Hugging Face Llama,
``keep_compressed=True`` on the CPU. The base stays compressed and frozen; the adapters' gradients
equal those computed on the decoded model; the adapters save and reload."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for wcodec.hf")
transformers = pytest.importorskip("transformers", reason="transformers is needed for wcodec.hf")
peft = pytest.importorskip("peft", reason="peft is not installed (pip install peft)")
pytest.importorskip("safetensors", reason="safetensors writes the source folder")

from wcodec.hf import WCodecModel  # noqa: E402

IDS = torch.tensor([[1, 400, 300, 20, 17, 88, 5, 260], [1, 33, 401, 7, 99, 12, 300, 2]])
TARGETS = ["q_proj", "v_proj", "down_proj"]


@pytest.fixture(scope="module")
def folder(stories_folders):
    return stories_folders[1]


def _lora(model):
    torch.manual_seed(0)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False)
    return peft.get_peft_model(model, cfg)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_lora_gradients_match_decoded_base(folder):
    plain, comp = _lora(WCodecModel.from_pretrained(folder)), _lora(WCodecModel.from_pretrained(folder, keep_compressed=True))
    for m in (plain, comp):
        m.train()
        m(IDS, labels=IDS).loss.backward()
    want, got = _grads(plain), _grads(comp)
    assert want.keys() == got.keys() and len(want) == 2 * len(TARGETS) * plain.config.num_hidden_layers
    for n in want:  # the same float32 ops in the same order
        torch.testing.assert_close(got[n], want[n], rtol=1e-5, atol=1e-7, msg=n)
    base = comp.base_model.model
    assert not any(p.requires_grad for n, p in base.named_parameters() if "lora_" not in n)


def test_lora_trains_saves_and_reloads(folder, tmp_path):
    model = _lora(WCodecModel.from_pretrained(folder, keep_compressed=True))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    losses = []
    for _ in range(6):
        loss = model(IDS, labels=IDS).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.05, losses
    cw = model.base_model.model.wcodec_weights
    assert not cw.report["decoded"] and cw.compressed_nbytes > 0
    model.eval()
    with torch.no_grad():
        want = model(IDS).logits
    model.save_pretrained(tmp_path / "adapter")
    base = WCodecModel.from_pretrained(folder, keep_compressed=True)
    again = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    with torch.no_grad():
        assert torch.equal(again(IDS).logits, want)

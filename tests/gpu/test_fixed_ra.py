"""The register-A wgmma kernel (wcodec.gpu.fixed_ra). On any machine with a Triton whose Gluon has
the Hopper ops and linear layouts: it compiles for sm_90 to asynchronous wgmma reading W's tile
from registers (no shared-memory A operand), x's tile copied by 4-byte cp.async, no spills. On an
sm_90 GPU (WCODEC_GPU_TESTS_ON_DEVICE=1; Gluon does not run under the interpreter): its outputs
match an fp32 reference and the Triton kernel's for escapes, bias, odd shapes, strided x, every
block height, split and config, bit-identical on repeated runs; the routing gives it RA_MIN_M < M
<= RA_MAX_M rows and a kernel that fails at its first launch gives way to the mma kernel."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the fixed-rate kernels")
triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.gpu import fixed as fx  # noqa: E402

from .test_fixed_mma import break_kernel, case, check_kernel, rel, weight  # noqa: E402
from .test_fixed_wgmma import compiled_report, gpu  # noqa: E402

ra_ok = pytest.mark.skipif(not fx._gluon_available(hopper=True, linear_layouts=True),
                           reason=f"triton {triton.__version__}'s Gluon lacks the Hopper ops or linear layouts")

_COMPILE = """
from wcodec.gpu.fixed_ra import configs, fixed_ra_kernel
cfg = configs(int(sys.argv[1]))[int(sys.argv[2])]
k = compile_sm90(fixed_ra_kernel, {**cfg.kwargs, "HAS_BIAS": True}, cfg.num_warps)
ptx = k.asm["ptx"]
mmas = re.findall(r"wgmma\\.mma_async[^;]*;", ptx)
print("RESULT " + json.dumps({"wgmma": len(mmas), "reg_a": sum(bool(re.search(r"\\}, \\{%r", m)) for m in mmas),
                              "cp4": len(re.findall(r"cp\\.async\\.ca\\.shared\\.global \\[[^;]*\\], 0x4", ptx)),
                              "wait1": ptx.count("wgmma.wait_group.sync.aligned 1"),
                              "stack": stack_bytes(k)}))
"""


@ra_ok
@pytest.mark.parametrize("bm,ci", [(32, 0), (32, 1)])
def test_compiles_to_register_a_wgmma_without_spills(bm, ci):
    got = compiled_report(_COMPILE.replace("sys.argv[1]", str(bm)).replace("sys.argv[2]", str(ci)))
    # every product reads W's tile from registers, one in flight while the next is decoded; x's
    # tile comes as 4-byte copies (its column pairs relabelled)
    assert got["wgmma"] > 0 and got["reg_a"] == got["wgmma"] and got["wait1"] > 0 and got["cp4"] > 0, got
    assert got["stack"] in (0, None), got


def _routes_all(monkeypatch):
    monkeypatch.setattr(fx, "RA_MIN_M", 0)
    monkeypatch.setattr(fx, "RA_MAX_M", 64)


@gpu
@ra_ok
@pytest.mark.parametrize("N,K,M", [(1000, 4112, 17), (777, 528, 24), (96, 64, 32), (300, 1040, 9), (64, 4096, 16),
                                   (4096, 1024, 48), (130, 272, 61)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_reference_and_triton_kernel(N, K, M, bias, monkeypatch):
    _routes_all(monkeypatch)
    fw, x, b, ref = case(N, K, M, bias)
    assert fx._runs_ra(x.contiguous()) and fx.pick_kind(M, x) == "mm"
    check_kernel(fw, x, b, ref, f"ra{max(16, 1 << (M - 1).bit_length())}", monkeypatch)


@gpu
@ra_ok
@pytest.mark.parametrize("bm", [16, 32, 64])
def test_every_config_matches_reference(bm, monkeypatch):
    """Each config, rows and K slices ending inside a tile and a K step, escapes and bias, at 1
    and 3 K slices; every element of y written, the same bits on a second run."""
    from wcodec.gpu.fixed_ra import configs
    _routes_all(monkeypatch)
    fw, x, b, ref = case(300, 1040, bm - 3, True)
    M = x.shape[0]
    for cfg in configs(bm):
        for split in (1, 3):
            fx._BEST[(f"ra{bm}", (fw.N, fw.K, 1 << (M - 1).bit_length(), x.dtype, b.dtype, split))] = cfg
            y = fx.linear(x, fw, b, split=split)
            assert not torch.isnan(y).any() and rel(y, ref) < 5e-3, (cfg, split)
            assert torch.equal(fx.linear(x, fw, b, split=split).view(torch.int16), y.view(torch.int16)), (cfg, split)


@gpu
@ra_ok
def test_heavy_tailed_weights_at_every_split():
    """Student-t weights (escapes above and below the window in every row) on a Llama-width row."""
    g = torch.Generator(device="cuda").manual_seed(7)
    z = torch.randn(256, 4096, device="cuda", generator=g)
    chi = sum(torch.randn(256, 4096, device="cuda", generator=g) ** 2 for _ in range(3))
    w = (z / (chi / 3).sqrt() * 0.0115).to(torch.bfloat16)
    fw = fx.encode_weight(w)
    x = torch.randn(32, 4096, device="cuda", generator=g).to(torch.bfloat16)
    ref = x.float() @ w.float().T
    assert fx._runs_ra(x) and fw.ecol.numel() > 256
    for split in (1, 2, 4, 8):
        assert rel(fx.linear(x, fw, split=split), ref) < 5e-3, split


@gpu
@ra_ok
def test_routing_gives_it_its_rows():
    x = torch.zeros(64, 64, dtype=torch.bfloat16, device="cuda")
    assert not fx._runs_ra(x[:fx.RA_MIN_M]) and fx._runs_ra(x[:fx.RA_MIN_M + 1])
    assert fx._runs_ra(x[:fx.RA_MAX_M]) and not fx._runs_ra(x[:fx.RA_MAX_M + 1])
    assert not fx._runs_ra(torch.zeros(24, 72, dtype=torch.bfloat16, device="cuda"))  # K % 16
    wide = torch.zeros(24, 66, dtype=torch.bfloat16, device="cuda")
    assert not fx._runs_ra(wide[:, 1:65])  # rows 132 bytes apart, 2-byte aligned
    assert not fx._runs_ra(x[:24].float())


@gpu
@ra_ok
def test_a_failing_kernel_warns_once_and_falls_back(monkeypatch):
    w = weight(200, 144, seed=3)
    fw = fx.encode_weight(w)
    x = torch.randn(20, 144, device="cuda").to(torch.bfloat16)
    break_kernel("ra", monkeypatch)
    monkeypatch.setattr(fx, "_RA_OK", {})
    monkeypatch.setattr(fx, "_BEST", {})
    with pytest.warns(RuntimeWarning, match="simulated compile failure"):
        y = fx.linear(x, fw)
    assert rel(y, x.float() @ w.float().T) < 5e-3
    assert not fx._ra_ready(x) and any(re.fullmatch(r"mma\d+", k[0]) for k in fx._BEST)  # the mma kernel ran

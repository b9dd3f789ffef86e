"""The warp-specialised wgmma kernel (wcodec.gpu.fixed_ws). On any machine with a Triton whose
Gluon has warp_specialize and the Hopper ops: it compiles for sm_90 to asynchronous wgmma with
mbarrier hand-offs between the partitions and per-partition register counts. On an sm_90 GPU
(WCODEC_GPU_TESTS_ON_DEVICE=1; Gluon does not run under the interpreter): its outputs match an
fp32 reference and the Triton kernel's for escapes, bias, odd shapes, strided x, every block
height, split and tile config; the routing gives it WS_MIN_M < M <= WS_MAX_M rows."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the fixed-rate kernels")
triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from wcodec.gpu import fixed as fx  # noqa: E402

from .test_fixed_mma import case, check_kernel, rel  # noqa: E402
from .test_fixed_wgmma import compiled_report, gpu  # noqa: E402

ws_ok = pytest.mark.skipif(not fx._gluon_available(hopper=True, ws=True),
                           reason=f"triton {triton.__version__}'s Gluon lacks warp_specialize or the Hopper ops")

_COMPILE = """
from wcodec.gpu.fixed_ws import configs, fixed_ws_kernel
cfg = configs(64)[0]
ptx = compile_sm90(fixed_ws_kernel, {**cfg.kwargs, "HAS_BIAS": True}, cfg.num_warps).asm["ptx"]
print("RESULT " + json.dumps({"wgmma": ptx.count("wgmma.mma_async"), "wait1": ptx.count("wgmma.wait_group.sync.aligned 1"),
                              "setmaxnreg": ptx.count("setmaxnreg"), "mbar_wait": ptx.count("mbarrier.try_wait"),
                              "mbar_arrive": ptx.count("mbarrier.arrive")}))
"""


@ws_ok
def test_compiles_to_warp_specialised_async_wgmma():
    got = compiled_report(_COMPILE)
    # one product in flight while the next buffer fills; the partitions hand buffers over by
    # mbarriers and take their own register counts
    assert got["wgmma"] > 0 and got["wait1"] > 0, got
    assert got["setmaxnreg"] > 0 and got["mbar_wait"] > 0 and got["mbar_arrive"] > 0, got


@gpu
@ws_ok
@pytest.mark.parametrize("N,K,M", [(1000, 4112, 40), (777, 528, 33), (96, 64, 64), (300, 1040, 100),
                                   (4096, 1024, 128), (520, 2048, 256), (130, 272, 250), (64, 4096, 17)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_reference_and_triton_kernel(N, K, M, bias, monkeypatch):
    monkeypatch.setattr(fx, "WGMMA_MAX_ESCAPES", 1.0)  # the test weights are rich in escapes
    monkeypatch.setattr(fx, "WS_MIN_M", 16)
    monkeypatch.setattr(fx, "WS_MAX_M", 256)
    monkeypatch.setattr(fx, "MMA_MAX_M", 16)
    monkeypatch.setattr(fx, "RA_MAX_M", 0)  # the register-A kernel comes first at 17-32 rows
    fw, x, b, ref = case(N, K, M, bias)
    assert fx._runs_ws(x) and fx.pick_kind(M, x) == "mm"
    check_kernel(fw, x, b, ref, f"ws{max(32, 1 << (M - 1).bit_length())}", monkeypatch)


@gpu
@ws_ok
def test_routing_gives_it_its_rows():
    x = torch.zeros(256, 64, dtype=torch.bfloat16, device="cuda")
    assert not fx._runs_ws(torch.zeros(100, 72, dtype=torch.bfloat16, device="cuda"))  # K % 16: 2-byte copies
    assert not fx._runs_ws(x[:fx.WS_MIN_M]) and fx._runs_ws(x[:fx.WS_MIN_M + 1])
    assert fx._runs_ws(x[:fx.WS_MAX_M]) and (fx.WS_MAX_M == 256 or not fx._runs_ws(x[:fx.WS_MAX_M + 1]))
    assert fx.pick_kind(fx.WS_MAX_M, x) == "mm"


@gpu
@ws_ok
@pytest.mark.parametrize("bm", [32, 64, 128, 256])
def test_every_config_matches_reference(bm, monkeypatch):
    """Each tile config the autotuner may pick, rows and K slices ending inside a tile, escapes
    and bias, at 1 and 3 K slices; every element of y written."""
    from wcodec.gpu.fixed_ws import configs
    monkeypatch.setattr(fx, "WGMMA_MAX_ESCAPES", 1.0)
    monkeypatch.setattr(fx, "WS_MIN_M", 16)
    monkeypatch.setattr(fx, "WS_MAX_M", 256)
    monkeypatch.setattr(fx, "MMA_MAX_M", 16)
    monkeypatch.setattr(fx, "RA_MAX_M", 0)  # the register-A kernel comes first at 17-32 rows
    fw, x, b, ref = case(300, 1040, bm - 3, True)
    M = x.shape[0]
    for cfg in configs(bm):
        for split in (1, 3):
            fx._BEST[(f"ws{bm}", (fw.N, fw.K, 1 << (M - 1).bit_length(), x.dtype, b.dtype, split))] = cfg
            y = fx.linear(x, fw, b, split=split)
            assert not torch.isnan(y).any() and rel(y, ref) < 5e-3, (cfg, split)

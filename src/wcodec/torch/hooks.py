"""The seed's ``make_decompression_hook``: a forward pre-hook that decodes a compressed weight
into a module just before it runs.

A thin entry point for users of the seed documents. For a whole model with bounded memory use
:class:`wcodec.torch.CompressedWeights` (one shared scratch buffer, batched GPU decode).
"""

from __future__ import annotations

import torch


def make_decompression_hook(module: torch.nn.Module, param_name: str, compressed_data, device=None,
                            decoder=None, keep: bool = False):
    """A forward pre-hook ``hook(module, inputs)`` that decodes ``compressed_data`` into
    ``module.<param_name>`` (a frozen Parameter) before each forward.

    compressed_data: an EncodedTensor (e.g. ``safe_open(path).record(name)``). device: where the
    weight goes (default: the device of the module's first parameter or buffer, else CPU).
    decoder: a :class:`wcodec.gpu.GPUDecoder` (default one for ``device``: the Triton decoder on
    CUDA, the CPU decoder otherwise). keep: decode once and keep the weight (later calls do
    nothing) instead of decoding on every forward. Register it yourself, as in the seed:
    ``module.register_forward_pre_hook(make_decompression_hook(module, "weight", rec))``.
    Raises CorruptDataError (bad record), DeviceError (device absent).
    """
    from ..gpu.api import GPUDecoder

    if device is None:
        first = next(iter(list(module.parameters()) + list(module.buffers())), None)
        device = first.device if first is not None else "cpu"
    dec = decoder or GPUDecoder(use_gpu=torch.device(device).type == "cuda", device=device)
    done = []

    def hook(mod, inputs):
        if keep and done:
            return None
        w = dec.decode_layer(compressed_data, name=param_name)
        setattr(mod, param_name, torch.nn.Parameter(w, requires_grad=False))
        done.append(True)
        return None

    return hook

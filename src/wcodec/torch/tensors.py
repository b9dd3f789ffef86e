"""Conversions between wcodec's numpy/safetensors view of tensors and torch: ``from_numpy``,
``torch_dtype``, ``resolve_dtype``. They live in ``wcodec._torch_tensors``, below both this
package and ``wcodec.gpu`` (which must not import ``wcodec.torch``)."""

from .._torch_tensors import from_numpy, linear_as_parameter, resolve_dtype, torch_dtype

__all__ = ["from_numpy", "linear_as_parameter", "resolve_dtype", "torch_dtype"]

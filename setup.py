"""Builds wcodec's optional C extension (wcodec._cext); everything else is in pyproject.toml.

The extension is optional: where no C compiler is present the build skips it and wcodec runs
its numba kernels instead (``wcodec.native.path()`` says which ran). One binary runs on every
x86-64 CPU: the AVX2 and AVX-512 kernels are compiled with per-function target attributes and
chosen at run time, so no -march flag is passed.
"""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    args = ["/O2"]
else:
    args = ["-O3", "-std=gnu99", "-fno-strict-aliasing"]

setup(ext_modules=[Extension("wcodec._cext", ["src/wcodec/csrc/wcodec_cext.c", "src/wcodec/csrc/predict.c",
                                              "src/wcodec/csrc/crc32.c", "src/wcodec/csrc/fixedcheck.c",
                                              "src/wcodec/csrc/fixedcodec.c"],
                             depends=["src/wcodec/csrc/predict.h", "src/wcodec/csrc/crc32.h",
                                      "src/wcodec/csrc/fixedcheck.h", "src/wcodec/csrc/fixedcodec.h"],  # shipped in the sdist
                             extra_compile_args=args, optional=True,
                             libraries=[] if sys.platform == "win32" else ["m"])])

"""The CuPy backend: CUDA kernels generated from ``templates/tiled_lbm.cu`` per variant.

Only :mod:`.backend` and :mod:`.device` import CuPy; the code generation (:mod:`.kernels` and the
modules it assembles) is plain Python, so kernels can be generated, compiled with ``nvcc`` and
emulated on a machine without a GPU.
"""

"""The CuPy backend: CUDA kernels generated from ``templates/tiled_lbm.cu`` per variant.

Only :mod:`.backend`, :mod:`.tiled_run`, :mod:`.state_access`, :mod:`.iolet_launch` and
:mod:`.device` import CuPy at module level; a run on the device is a
:class:`~.device_run.DeviceRun` (tiled or compact). The code generation (:mod:`.kernels` and the
modules it assembles) is plain Python, so kernels can be generated, compiled with ``nvcc`` and
emulated on a machine without a GPU.
"""

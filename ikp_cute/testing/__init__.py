"""Helpers for testing and measuring instrumented kernels, shipped so that users' CI can check their own
kernels the way ours is checked (import them explicitly; ``import ikp_cute`` does not load them):

* ``ikp_cute.testing.ptx``: PTX text analyses (normalized PTX for "disabled == uninstrumented", loops
  and loop-invariant stores for "the cursor is carried").
* ``ikp_cute.testing.sass``: SASS instruction counts from a cubin, and the compile options that keep it.
* ``ikp_cute.testing.smem``: the shared memory a compiled kernel's launch asks for (static arrays from the PTX and
  the cubin, the dynamic size from the compiled object's host code).
* ``ikp_cute.testing.pool_model``: a recording pool built on the host as the device builds it (the reference
  of the pool's protocol).
* ``ikp_cute.testing.kernels``: the kernels with a known record structure that our tests, benchmarks
  (benchmarks/device_overhead.py) and GPU suite (gpu/device_suite.py) run; CuTe DSL reads kernel source,
  so they live in .py files of their own.
"""

"""The loading stage: inputs on disk into the trace model, and captures onto disk (docs/layout.md).

* capture.py: save_capture and load_capture, BUFFER.npy + its sidecar BUFFER.json, together;
* sidecar.py: the one schema of the sidecar and of the ring summary, their one writer and one validator;
* ring.py: a launch ring's counts (its sidecar block, the PREFIX_ring.json summary);
* inputs.py: every input a command reads (captures, folders of launches, ring folders, other tracers'
  traces through host_decode.interop, the --names file), loaded in one place.

The stage imports core, interop and torch_traces only; analysis and everything downstream import it
(tests/unit/test_layout.py).
"""

"""The torch.compile route of examples/torch_compile/run.py on CPU: an opaque kernel wrapped by `opaque`
compiles with fullgraph=True and no graph break, while the same call made directly through an
untraceable host API breaks the graph (the negative control). GPU twin: gpu/capture_suite.py."""

from pathlib import Path

import pytest

from tests.support.scripts import load_script

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]


def load_example():
    return load_script(ROOT / "examples/torch_compile/run.py", "torch_compile_example")


def untraceable_attention(q, k, v):
    """Stands in for FA4's host API: works on raw device pointers (as a DLPack / TVM-FFI launch does),
    which dynamo cannot trace into a graph."""
    import ctypes

    out = torch.empty_like(q)
    ctypes.memmove(out.data_ptr(), q.contiguous().data_ptr(), q.numel() * q.element_size())
    return out * 0.5 + v


class Block(torch.nn.Module):
    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    def forward(self, q, k, v):
        return torch.relu(self.attention(q * 1.0, k, v)) + 1.0


def test_custom_op_route_has_no_graph_break_and_direct_call_has_one():
    example = load_example()
    q, k, v = (torch.randn(2, 8, 4, 16) for _ in range(3))
    op = example.opaque("ikp_tests::stand_in_attention", untraceable_attention)
    assert example.graph_breaks(Block(untraceable_attention), q, k, v) >= 1  # the control can fail
    assert example.graph_breaks(Block(op), q, k, v) == 0
    torch._dynamo.reset()
    compiled = torch.compile(Block(op), fullgraph=True, backend="eager")
    assert torch.equal(compiled(q, k, v), Block(untraceable_attention)(q, k, v))

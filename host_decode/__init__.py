"""Host side of ikp_cute: wire format, decoder, trace model, writers, analysis, adapters (numpy only)."""

from host_decode.core.errors import DecodeError
from host_decode.core.model import LossReport, Names, Trace

__all__ = ["DecodeError", "LossReport", "Names", "Trace", "decode", "load_capture"]


def __getattr__(name):  # keep `import host_decode` cheap: the decoder loads on first use
    if name in ("decode", "load_capture"):
        from host_decode import decode as _decode

        return getattr(_decode, name)
    raise AttributeError(name)

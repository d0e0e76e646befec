"""FA4's sm90 forward with examples/fa4_sm90's full-detail regions (flash-attn-4 4.0.0b36, CuTe DSL 4.8.1,
b=1 s=1024 h=4 d=128 bf16, compiled on the CPU): writes fa4_full.sm_90a.cubin next to this file and times
pc2region on it. Needs torch and flash_attn (not in CI: the cubin is committed)."""

import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, ROOT)
os.environ.setdefault("FLASH_ATTENTION_ARCH", "sm_90")
os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")
import torch  # noqa: E402
from flash_attn.cute import interface  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from ikp_cute.testing.sass import dump_options  # noqa: E402
from tests.support.examples import BAKED, import_example, profile_spec  # noqa: E402

fi = import_example("fa4_sm90", "fa4_instrumented")
nb = fi.num_ctas(1, 1024, 4)
spec = profile_spec(fi.events_for("full"), 3, nb, 128, baked=BAKED)
compile_fn = interface.cute.compile


class Keep:
    def __call__(self, *a, options="", **k):
        return compile_fn(*a, options=dump_options(f"{options} --keep-cubin"), **k)


interface.cute.compile = Keep()
interface._flash_attn_fwd.compile_cache = {}
with FakeTensorMode(), fi.patched_interface(spec, "full"):
    q = torch.empty(1, 1024, 4, 128, dtype=torch.bfloat16, device="cuda")
    interface.flash_attn_func(q, torch.empty_like(q), torch.empty_like(q))
    cache = interface._flash_attn_fwd.compile_cache
    (compiled,) = list(cache.values()) if isinstance(cache, dict) else list(cache._cache.values())
cubin = compiled.__cubin__
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fa4_full.sm_90a.cubin"), "wb") as f:
    f.write(cubin)
from host_decode.hardware import pc2region  # noqa: E402

t0 = time.perf_counter()
m = pc2region.build_map(cubin, names=spec.events.as_dict())
print(f"pc2region: {m.pc.size} instructions, {len(m.markers)} markers, {time.perf_counter() - t0:.2f} s")
print(m.summary())
print(m.problems[:10])

"""FA4's Blackwell forward (FlashAttentionForwardSm100) compiled for sm_100a on a CPU with pipeline tracing:
pipelines found, markers per call site in the PTX, the audit's coverage line, off == untouched, and
(--pc2region, ~3 minutes)
the record stores pc2region finds in the sm_100a cubin. It cannot run here: there is no Blackwell GPU.

    python examples/pipelines/sm100_compile.py [--pc2region]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

import compile_cpu as cc

cc.sm100_env()  # before cutlass / flash_attn are imported


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--pc2region", action="store_true")
    args = parser.parse_args(argv)
    from ikp_cute import ProfileSpec
    from ikp_cute.pipelines import trace_pipelines

    spec = ProfileSpec(num_groups=16, num_blocks=148, write_stride=148 * 16, records_per_lane=256, warps_per_group=1)
    trace = trace_pipelines(spec, level="signals", address=0x7F0012340000)
    plain = cc.fa4_sm100_compile()
    traced = cc.fa4_sm100_compile(trace)
    print("off identical:", cc.fa4_sm100_compile().__ptx__ == plain.__ptx__)
    for pipe in trace.metadata()["pipelines"]:
        print(f"{pipe['name']:12} {pipe['class']:20} {pipe['site']:24} stages {pipe['num_stages']}  "
              + "  ".join(f"{op}: {len(sites)} site(s)" for op, sites in pipe["call_sites"].items()))
    found = collections.Counter(re.findall(r"/\* ikp (\S+@\S+)", traced.__ptx__))
    print(f"{sum(found.values())} record blocks, {len(found)} op x call-site markers in the PTX")
    from ikp_cute.pipelines.audit import summary

    print("audit:", *summary(trace.metadata()), sep="\n  ")
    if args.pc2region:
        from host_decode.hardware import pc2region

        t0 = time.time()
        rmap = pc2region.build_map(traced.__cubin__)
        how = collections.Counter(m.get("how") for m in rmap.markers)
        seconds = time.time() - t0
        print(f"pc2region: {len(rmap.markers)} record stores in the sm_100a cubin ({dict(how)}), {seconds:.0f} s")


if __name__ == "__main__":
    main()

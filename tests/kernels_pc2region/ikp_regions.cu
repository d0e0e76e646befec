// pc2region test kernel written with the project's CUDA C++ header (cuda_include/ikp.cuh): guarded
// record writes (capacity checks compiled to predicated CS2R/STG), anchors, finalize with the SM id.
// Structure: OUTER(1) { loop (unrolled by 4) { BODY(2) } ; if (flag) { SLOW(3): helper() + division } }
// Compiled by tests/unit/host_decode/hardware/test_pc2region.py with nvcc -arch=sm_90a -cubin -I cuda_include.
#include "ikp.cuh"
enum { EV_OUTER = 1, EV_BODY = 2, EV_SLOW = 3 };
__device__ __noinline__ float helper(float x, int n) { for (int i = 0; i < n; ++i) x = x * 1.0001f + 0.5f; return x; }
extern "C" __global__ void k2(float* out, const float* in, void* pbuf, int n, int flag, int ws, int rpl) {
  ikp::Profiler<> prof(pbuf, 1, 0, threadIdx.x == 0, ws, rpl);
  float acc = in[threadIdx.x];
  {
    ikp::Region r(prof, EV_OUTER);
#pragma unroll 4
    for (int i = 0; i < n; ++i) {
      ikp::Region b(prof, EV_BODY);
      acc = acc * 1.5f + in[i];
    }
    if (flag) {
      ikp::Region s(prof, EV_SLOW);
      acc = helper(acc, flag) / in[flag];
    }
  }
  out[threadIdx.x] = acc;
  prof.finalize();
}

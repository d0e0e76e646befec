// pc2region test kernel (CUDA C++), compiled here with
//   nvcc -arch=sm_90a -cubin -lineinfo -O3 -o markers.sm_90a.cubin markers.cu
// It writes v1 records with its own minimal marker (independent of cuda_include/ikp.cuh):
//   record = (globaltimer_lo << 32) | tag,  tag = (lane << 12) | (event_id << 2) | type
// Program structure (checked by tests/unit/host_decode/hardware/test_pc2region.py):
//   OUTER(1) begin
//     loop, unrolled by 4:            BODY(2) begin ... FMA 1.5 ... BODY end
//     if (flag) (branch-only region): SLOW(3) begin ... helper() (__noinline__, placed after EXIT)
//                                     ... float division (slow path subroutine after EXIT) ... SLOW end
//     nested: INNER(4) inside OUTER:  INNER begin ... FMA 3.25 ... INNER end
//   OUTER end
//   the result store and EXIT are outside every region
#include <cstdint>

#define EV_OUTER 1
#define EV_BODY 2
#define EV_SLOW 3
#define EV_INNER 4

__device__ __forceinline__ void mark(unsigned long long* buf, unsigned slot, unsigned lane, unsigned id, unsigned type) {
  unsigned t;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
  unsigned tag = (lane << 12) | (id << 2) | type;
  unsigned long long rec = ((unsigned long long)t << 32) | tag;
  asm volatile("st.global.b64 [%0], %1;" ::"l"(buf + slot), "l"(rec) : "memory");
}

__device__ __noinline__ float helper(float x, int n) {
  for (int i = 0; i < n; ++i) x = x * 1.0001f + 0.5f;
  return x;
}

extern "C" __global__ void markers(float* out, const float* in, unsigned long long* buf, int n, int flag) {
  unsigned lane = blockIdx.x;
  unsigned stride = gridDim.x;
  unsigned s = 1 + lane;
  float acc = in[threadIdx.x];
  mark(buf, s, lane, EV_OUTER, 0); s += stride;
#pragma unroll 4
  for (int i = 0; i < n; ++i) {
    mark(buf, s, lane, EV_BODY, 0); s += stride;
    acc = acc * 1.5f + in[i];
    mark(buf, s, lane, EV_BODY, 1); s += stride;
  }
  if (flag) {
    mark(buf, s, lane, EV_SLOW, 0); s += stride;
    acc = helper(acc, flag) / in[flag];
    mark(buf, s, lane, EV_SLOW, 1); s += stride;
  }
  mark(buf, s, lane, EV_INNER, 0); s += stride;
  acc = acc * 3.25f + in[n];
  mark(buf, s, lane, EV_INNER, 1); s += stride;
  mark(buf, s, lane, EV_OUTER, 1); s += stride;
  out[threadIdx.x] = acc;
}

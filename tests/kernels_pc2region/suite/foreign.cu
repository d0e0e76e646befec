// Class 7/8: a kernel without markers next to a kernel with foreign markers: a 32-bit shared-memory
// store of timer|tag (IKET style), a 64-bit store of a bare %globaltimer (no tag) and a 64-bit
// (timer, payload) pair with no tag bits.
// names: (none: the foreign kernel has no v1 records)
extern "C" __global__ void plain_kernel(float* out, const float* in) {
  out[threadIdx.x] = in[threadIdx.x] * 2.0f;  // @ -
}
extern "C" __global__ void foreign_kernel(float* out, const float* in, unsigned* tbuf, unsigned long long* tsbuf) {
  __shared__ unsigned ring[64];
  unsigned t;
  asm volatile("{\n\t.reg .u32 lo;\n\tmov.u32 lo, %%globaltimer_lo;\n\tand.b32 lo, lo, 0xFFFFFF00;\n\tor.b32 %0, lo, 5;\n\t}" : "=r"(t));
  ring[threadIdx.x % 64] = t;
  float v = in[threadIdx.x] * 3.0f;  // @ -
  unsigned long long g;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
  tsbuf[blockIdx.x] = g;
  unsigned lo;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(lo));
  tsbuf[64 + blockIdx.x] = (static_cast<unsigned long long>(__float_as_uint(v)) << 32) | lo;  // (timer, payload)
  __syncthreads();
  tbuf[threadIdx.x] = ring[(threadIdx.x + 1) % 64];
  out[threadIdx.x] = v;  // @ -
}

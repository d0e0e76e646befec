// Predication, unrolling, early exits and overlapping (non-nested) regions.
// names: 1=OUTER 2=BODY 3=EARLY 4=A 5=B
// moved: mixed_kernel 0x0560 OUTER END BODY's record address (@!P1 LEA)
// moved: mixed_kernel 0x0590 OUTER the iteration's `acc + in[i]` (FADD), scheduled after END BODY's timer read
// moved: mixed_kernel 0x05a0 OUTER END BODY's record address (@!P1 LEA.HI.X)
// moved: mixed_kernel 0x05d0 OUTER the iteration's `acc > 0` (FSETP), scheduled after END BODY's timer read
// moved: mixed_kernel 0x05e0 OUTER the iteration's `acc * in[i]` (@P1 FMUL), scheduled after END BODY's timer read
// moved: mixed_kernel 0x0690 OUTER END BODY's record address (@!P1 IMAD.WIDE)
// moved: mixed_kernel 0x06b0 OUTER the iteration's `acc + in[i]` (FADD), scheduled after END BODY's timer read
// moved: mixed_kernel 0x06c0 OUTER END BODY's record address (@!P1 IMAD.MOV)
// moved: mixed_kernel 0x06f0 OUTER END BODY's record address (@!P1 IMAD.IADD)
// moved: mixed_kernel 0x0710 OUTER the iteration's `acc > 0` (FSETP), scheduled after END BODY's timer read
// moved: mixed_kernel 0x0720 OUTER the iteration's `acc * in[i]` (@P1 FMUL), scheduled after END BODY's timer read
// moved: mixed_kernel 0x0950 OUTER END BODY's record address (@!P2 IMAD.WIDE)
// moved: mixed_kernel 0x0990 OUTER END BODY's record address (@!P2 IMAD.MOV)
// moved: mixed_kernel 0x09c0 OUTER END BODY's record address (@!P2 IMAD.IADD)
#include "ikp.cuh"
enum { OUTER = 1, BODY = 2, EARLY = 3, A = 4, B = 5 };
extern "C" __global__ void mixed_kernel(float* out, const float* in, void* pbuf, int n, int ws, int rpl) {
  ikp::Profiler<> prof(pbuf, 1, 0, threadIdx.x == 0, ws, rpl);
  float acc = in[threadIdx.x];
  if (acc < -100.0f) {  // early exit before any region
    out[threadIdx.x] = 0.0f;  // @ -
    return;
  }
  prof.begin(OUTER);
#pragma unroll 4
  for (int i = 0; i < n; ++i) {
    prof.begin(BODY);
    acc = acc > 0.0f ? acc * in[i] : acc + in[i];  // @ OUTER/BODY
    prof.end(BODY);
  }
  if (acc > 1e6f) {
    prof.begin(EARLY);
    out[threadIdx.x] = acc;  // @ OUTER/EARLY
    prof.end(EARLY);
    prof.end(OUTER);
    prof.finalize();
    return;
  }
  prof.begin(A);
  acc = acc * in[n];  // @ OUTER/A
  prof.begin(B);
  acc = acc + in[n + 1];  // @ OUTER/A/B
  prof.end(A);  // A ends while B is still open: overlapping, not nested
  acc = acc * in[n + 2];  // @ OUTER/B
  prof.end(B);
  prof.end(OUTER);
  out[threadIdx.x] = acc;  // @ -
  prof.finalize();
}

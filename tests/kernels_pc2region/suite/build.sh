#!/bin/bash
# Rebuild the suite's cubins (nvcc 13, -O3). Sources edited => rebuild, re-check the `// moved:` PCs by hand.
set -e
cd "$(dirname "$0")"
for f in ${@:-*.cu}; do
  nvcc -O3 -arch=sm_90a -cubin -lineinfo -I ../../../cuda_include -o "${f%.cu}.sm_90a.cubin" "$f"
done

#!/usr/bin/env bash
# GPU run for examples/interop: a Proton intra-kernel trace of a Triton kernel, and one launch of the
# twin kernel recorded by ikp_cute and IKET together (IKET's launcher). Files land in $OUT.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=python3
mkdir -p "$OUT"
echo "== twin under IKET"
wd=/tmp/iket_wd; rm -rf $wd; mkdir -p $wd
PYTHONPATH=$root:$PYTHONPATH timeout 420 $py -m iket.cli.main --working-dir $wd profile --postprocess all -- \
  $py "$root/examples/interop/capture_twin.py" --out "$OUT/ikp_twin.npy" 2>&1 | tail -30
find $wd -maxdepth 4 -type f | head -40
tar czf "$OUT/iket_out.tar.gz" -C $wd . 2>/dev/null
ls -la "$OUT"

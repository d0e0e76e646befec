"""Bad input of every kind, fed to the commands as a user would: each is refused cleanly. Clean means exit 2
(or 1 where the command's contract says so), a last stderr line `ikp CMD: error: ...` naming the problem,
no traceback, no output file and no temporary left behind. Every case runs in its own process under a
memory limit (a request for a huge allocation must be refused, not attempted) and a time limit.

`python tests/unit/host_decode/cli/test_bad_inputs.py` prints the count: kinds tried / refused cleanly."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[4]
EX = ROOT / "examples"
PC = ROOT / "tests" / "fixtures" / "pc"
FLAG_RANKS = ROOT / "tests" / "fixtures" / "flag_ranks"
MEMORY_LIMIT = 3 << 30  # bytes of address space a case may take (RLIMIT_AS)
RUNNER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from host_decode.cli import main
sys.exit(main(sys.argv[1:]))
"""


# ------------------------------------------------------------------------------------------- inputs

def capture(d: Path, name: str = "cap", buf=None, side=None) -> Path:
    """A capture in `d`: the basic example's, or `buf` (an array or raw bytes) with sidecar `side` (a dict,
    raw bytes or text; None: the example's sidecar; False: none)."""
    npy = d / f"{name}.npy"
    if buf is None:
        shutil.copy(EX / "basic" / "capture.npy", npy)
    elif isinstance(buf, bytes):
        npy.write_bytes(buf)
    else:
        np.save(npy, buf)
    if side is None:
        shutil.copy(EX / "basic" / "capture.json", npy.with_suffix(".json"))
    elif side is not False:
        raw = side if isinstance(side, (bytes, str)) else json.dumps(side)
        npy.with_suffix(".json").write_bytes(raw.encode() if isinstance(raw, str) else raw)
    return npy


def sidecar(**changes) -> dict:
    side = json.loads((EX / "basic" / "capture.json").read_text())
    side.update(changes)
    return side


def fa4(d: Path, spoil) -> Path:
    npy = d / "fa4.npy"
    shutil.copy(EX / "pipelines" / "fa4_sm90_signals.npy", npy)
    side = json.loads((EX / "pipelines" / "fa4_sm90_signals.json").read_text())
    spoil(side)
    npy.with_suffix(".json").write_text(json.dumps(side))
    return npy


def real_npy_bytes() -> bytes:
    return (EX / "basic" / "capture.npy").read_bytes()


def header(blocks: int, groups: int) -> np.ndarray:
    return np.array([(groups << 32) | blocks], np.uint64)


def text(d: Path, name: str, content) -> Path:
    p = d / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


def gz(d: Path, name: str, content: bytes) -> Path:
    p = d / name
    p.write_bytes(gzip.compress(content))
    return p


def bomb(d: Path, name: str = "bomb.json.gz") -> Path:
    p = d / name
    with gzip.open(p, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        for _ in range(80):
            f.write(b" " * (1 << 20))
        f.write(b"]}")
    return p


def deep(n: int = 100_000) -> bytes:
    return b"[" * n + b"]" * n


def fifo_with(d: Path, data: bytes) -> Path:
    """A FIFO that a thread fills with `data` once a reader opens it (the reader sees the bytes, then EOF)."""
    p = d / "fifo.npy"
    os.mkfifo(p)

    def feed():
        with open(p, "wb") as f:
            f.write(data)

    threading.Thread(target=feed, daemon=True).start()
    return p


def torch_events(events) -> bytes:
    return json.dumps({"traceEvents": events}).encode()


def cubin_head(n: int) -> bytes:
    return (PC / "tiles_real_ncu.cubin").read_bytes()[:n]


# ------------------------------------------------------------------------------------------- cases
# name -> (function of the case folder d giving argv, the outputs that must not appear (names in d)); argv
# paths are absolute or relative to d (the process runs there).

I8 = np.int8
CASES = {
    # --- the capture buffer (.npy)
    "npy empty file": lambda d: ["decode", text(d, "e.npy", b"")],
    "npy truncated header": lambda d: ["decode", text(d, "t.npy", real_npy_bytes()[:20])],
    "npy truncated data": lambda d: ["decode", text(d, "t.npy", real_npy_bytes()[:-4000])],
    "npy float64": lambda d: ["decode", capture(d, buf=np.zeros(100, np.float64), side=False)],
    "npy float32": lambda d: ["stats", capture(d, buf=np.ones(100, np.float32), side=False)],
    "npy int8": lambda d: ["decode", capture(d, buf=np.ones(100, I8), side=False)],
    "npy complex": lambda d: ["decode", capture(d, buf=np.ones(10, np.complex128), side=False)],
    "npy 2-D": lambda d: ["decode", capture(d, buf=np.zeros((10, 10), np.uint64), side=False)],
    "npy 0-d": lambda d: ["decode", capture(d, buf=np.array(5, np.uint64), side=False)],
    "npy object (pickle)": lambda d: ["decode", capture(d, buf=np.array([{"a": 1}], dtype=object), side=False)],
    "npy structured": lambda d: ["decode", capture(d, buf=np.zeros(4, [("a", "u8"), ("b", "u8")]), side=False)],
    "npy bool": lambda d: ["decode", capture(d, buf=np.ones(64, bool), side=False)],
    "npy string": lambda d: ["decode", capture(d, buf=np.array(["abc", "def"]), side=False)],
    "npy zero length": lambda d: ["decode", capture(d, buf=np.zeros(0, np.uint64), side=False)],
    "npy header claims more data": lambda d: ["decode", text(d, "m.npy", _claims_more())],
    "npy header not a dict": lambda d: ["decode", text(d, "h.npy",
                                                       b"\x93NUMPY\x01\x00\x10\x00" + b"[1, 2, 3]      \n")],
    "npy random bytes": lambda d: ["decode", text(d, "r.npy", np.random.default_rng(1).bytes(4096))],
    "npy text": lambda d: ["decode", text(d, "t.npy", "hello, this is not a capture\n")],
    "npy a zip (npz)": lambda d: ["decode", _npz(d)],
    "npy header only": lambda d: ["decode", capture(d, buf=header(4, 2), side=False)],
    "npy zero blocks": lambda d: ["decode", capture(d, buf=np.concatenate([header(0, 2), np.zeros(8, np.uint64)]),
                                                    side=False)],
    "npy huge block count": lambda d: ["decode", capture(d, buf=np.concatenate(
        [header(2**31 - 1, 2), np.zeros(8, np.uint64)]), side=False)],
    "npy huge group count": lambda d: ["stats", capture(d, buf=np.concatenate(
        [header(2, 2**31 - 1), np.zeros(8, np.uint64)]), side=False)],
    "npy fortran 2-D": lambda d: ["decode", capture(d, buf=np.asfortranarray(np.zeros((4, 4), np.uint64)),
                                                    side=False)],
    "npy is a folder": lambda d: ["report", _mkdir(d / "x.npy"), "-o", "r.html"],
    "npy missing": lambda d: ["decode", d / "missing.npy"],
    "npy symlink loop": lambda d: ["decode", _loop(d)],
    "npy dangling symlink": lambda d: ["stats", _dangling(d)],
    "npy /dev/null": lambda d: ["decode", "/dev/null"],
    "npy FIFO of garbage": lambda d: ["decode", fifo_with(d, b"garbage" * 100)],
    "npy a socket": lambda d: ["decode", _socket(d)],
    "npy the sidecar given as the capture's pair missing": lambda d: ["decode", text(d, "lonely.json", "{}")],
    # --- the sidecar (BUFFER.json)
    "sidecar empty": lambda d: ["decode", capture(d, side=b"")],
    "sidecar not JSON": lambda d: ["decode", capture(d, side="{not json")],
    "sidecar a list": lambda d: ["decode", capture(d, side=[1, 2])],
    "sidecar a string": lambda d: ["decode", capture(d, side='"text"')],
    "sidecar deep nesting": lambda d: ["decode", capture(d, side=deep())],
    "sidecar 5000-digit integer": lambda d: ["decode", capture(d, side='{"write_stride": ' + "9" * 5000 + "}")],
    "sidecar binary": lambda d: ["decode", capture(d, side=b"\xff\xfe\x00garbage")],
    "sidecar BOM": lambda d: ["decode", capture(d, side=b"\xef\xbb\xbf" + json.dumps(sidecar()).encode())],
    "sidecar write_stride string": lambda d: ["decode", capture(d, side=sidecar(write_stride="16"))],
    "sidecar write_stride negative": lambda d: ["decode", capture(d, side=sidecar(write_stride=-16))],
    "sidecar write_stride float": lambda d: ["decode", capture(d, side=sidecar(write_stride=16.5))],
    "sidecar write_stride bool": lambda d: ["decode", capture(d, side=sidecar(write_stride=True))],
    "sidecar write_stride huge": lambda d: ["decode", capture(d, side=sidecar(write_stride=2**62))],
    "sidecar write_stride NaN": lambda d: ["decode", capture(d, side=json.dumps(sidecar()).replace(
        '"write_stride": 16', '"write_stride": NaN'))],
    "sidecar num_blocks zero": lambda d: ["decode", capture(d, side=sidecar(num_blocks=0))],
    "sidecar records_per_lane zero": lambda d: ["decode", capture(d, side=sidecar(records_per_lane=0))],
    "sidecar mode Atomic": lambda d: ["decode", capture(d, side=sidecar(mode="Atomic"))],
    "sidecar mode a number": lambda d: ["decode", capture(d, side=sidecar(mode=5))],
    "sidecar fence CTA": lambda d: ["stats", capture(d, side=sidecar(fence="CTA"))],
    "sidecar events a number": lambda d: ["decode", capture(d, side=sidecar(events=5))],
    "sidecar events key not an id": lambda d: ["decode", capture(d, side=sidecar(events={"a": "x"}))],
    "sidecar events negative id": lambda d: ["decode", capture(d, side=sidecar(events={"-1": "x"}))],
    "sidecar events id past 1023": lambda d: ["decode", capture(d, side=sidecar(events={"5000": "x"}))],
    "sidecar groups a string": lambda d: ["decode", capture(d, side=sidecar(groups="producer"))],
    "sidecar ring a list": lambda d: ["stats", capture(d, side=sidecar(ring=[]))],
    "sidecar ring filled negative": lambda d: ["stats", capture(d, side=sidecar(ring={"filled": -1}))],
    "sidecar misspelt Mode": lambda d: ["decode", capture(d, side=sidecar(Mode="cursor"))],
    "sidecar format ikp-v2": lambda d: ["decode", capture(d, side=sidecar(format="ikp-v2"))],
    "sidecar launch_index negative": lambda d: ["decode", capture(d, side=sidecar(launch_index=-1))],
    "sidecar host_ns negative": lambda d: ["merge", capture(d, side=sidecar(host_ns=-5)), "-o", "m.json"],
    "sidecar sm_count zero": lambda d: ["stats", capture(d, side=sidecar(sm_count=0))],
    "sidecar stray_records negative": lambda d: ["decode", capture(d, side=sidecar(stray_records=-1))],
    "sidecar trimmed_from_blocks zero": lambda d: ["decode", capture(d, side=sidecar(trimmed_from_blocks=0))],
    "sidecar barriers a list": lambda d: ["waits", fa4(d, lambda s: s.update(barriers=[]))],
    "sidecar pipelines an object": lambda d: ["waits", fa4(d, lambda s: s.update(pipelines={}))],
    "sidecar pipeline_level Signals": lambda d: ["waits", fa4(d, lambda s: s.update(pipeline_level="Signals"))],
    "sidecar pipeline scope CTA": lambda d: ["waits", fa4(d, lambda s: s["pipelines"][0].update(scope="CTA"))],
    "sidecar pipeline num_stages 0": lambda d: ["waits", fa4(d, lambda s: s["pipelines"][0].update(num_stages=0))],
    "sidecar pipeline released_by tma": lambda d: ["waits", fa4(d, lambda s: s["pipelines"][0].update(
        released_by="tma"))],
    "sidecar pipeline ids past 1023": lambda d: ["waits", fa4(d, lambda s: s["pipelines"][0].update(
        ids={"acquire": 1023}))],
    "sidecar pipeline name missing": lambda d: ["waits", fa4(d, lambda s: s["pipelines"][0].pop("name"))],
    "sidecar pipeline_options polls Begin": lambda d: ["waits", fa4(d, lambda s: s["pipeline_options"].update(
        polls="Begin"))],
    "sidecar barrier names key 99": lambda d: ["waits", fa4(d, lambda s: s["barriers"].update(names={"99": "x"}))],
    "waits on a capture without pipelines": lambda d: ["waits", capture(d)],
    # --- --names
    "names not JSON": lambda d: ["decode", capture(d), "--names", text(d, "n.json", "{")],
    "names a list": lambda d: ["stats", capture(d), "--names", text(d, "n.json", "[1, 2]")],
    "names events a number": lambda d: ["decode", capture(d), "--names", text(d, "n.json", '{"events": 5}')],
    "names missing file": lambda d: ["decode", capture(d), "--names", d / "nope.json"],
    "names deep nesting": lambda d: ["decode", capture(d), "--names", text(d, "n.json", deep())],
    "names on a foreign trace": lambda d: ["decode", EX / "interop" / "proton_add.chrome_trace", "--names",
                                           text(d, "n.json", '{"events": {"0": "x"}}')],
    # --- torch.profiler traces (ikp kernels, merge --torch)
    "torch empty file": lambda d: ["kernels", text(d, "t.json", ""), "--no-cache"],
    "torch not JSON": lambda d: ["kernels", text(d, "t.json", "{oops"), "--no-cache"],
    "torch a list of numbers": lambda d: ["kernels", text(d, "t.json", "[1, 2, 3]"), "--no-cache"],
    "torch traceEvents a number": lambda d: ["kernels", text(d, "t.json", '{"traceEvents": 5}'), "--no-cache"],
    "torch truncated": lambda d: ["kernels", text(d, "t.json", gzip.decompress(
        (EX / "insight" / "torch_trace.json.gz").read_bytes())[:3000]), "--no-cache"],
    "torch .gz truncated": lambda d: ["kernels", text(d, "t.json.gz", (EX / "insight" / "torch_trace.json.gz")
                                                      .read_bytes()[:400]), "--no-cache"],
    "torch .gz garbage after magic": lambda d: ["kernels", text(d, "t.json.gz", b"\x1f\x8b" + b"x" * 100),
                                                "--no-cache"],
    "torch gzip bomb": lambda d: ["kernels", bomb(d), "--no-cache"],
    "torch deep nesting": lambda d: ["kernels", text(d, "t.json", b'{"traceEvents": ' + deep() + b"}"), "--no-cache"],
    "torch events not objects": lambda d: ["kernels", text(d, "t.json", '{"traceEvents": [1, "x", null]}'),
                                           "--no-cache"],
    "torch kernels --merge of a kernel it lacks": lambda d: ["kernels", text(d, "t.json", torch_events(
        [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7}])), "--no-cache",
        "--merge", EX / "insight" / "launch_0.npy", "-o", "m.json"],
    "torch ts infinite": lambda d: ["kernels", text(d, "t.json", b'{"traceEvents": [{"ph": "X", "cat": "kernel", '
                                    b'"name": "k", "ts": 1e400, "dur": 1, "pid": 0, "tid": 7}]}'), "--no-cache"],
    "torch binary": lambda d: ["kernels", text(d, "t.json", np.random.default_rng(2).bytes(5000)), "--no-cache"],
    "torch merge: trace not JSON": lambda d: ["merge", capture(d), "--torch", text(d, "t.json", "{"), "-o", "m.json"],
    "torch merge: gzip bomb": lambda d: ["merge", capture(d), "--torch", bomb(d), "-o", "m.json"],
    "torch merge: kernel not in trace": lambda d: ["merge", EX / "insight" / "launch_0.npy", "--torch",
                                                   EX / "insight" / "torch_trace.json.gz", "--kernel", "no_such",
                                                   "-o", "m.json"],
    "torch kernels --capture missing": lambda d: ["kernels", EX / "insight" / "torch_trace.json.gz", "--no-cache",
                                                  "--capture", d / "missing.npy"],
    "torch kernels --merge bad capture": lambda d: ["kernels", EX / "insight" / "torch_trace.json.gz", "--no-cache",
                                                    "--merge", text(d, "b.npy", "x"), "-o", "m.json"],
    # --- other tracers' traces
    "IKET launches not a list": lambda d: ["decode", text(d, "i.trace.json", '{"launches": "x"}')],
    "IKET deep nesting": lambda d: ["decode", text(d, "i.trace.json", b'{"launches": ' + deep() + b"}")],
    "Proton events not objects": lambda d: ["decode", text(d, "p.chrome_trace", '[1, 2, "pid": ]')],
    "foreign .pftrace random": lambda d: ["decode", text(d, "r.pftrace", np.random.default_rng(3).bytes(3000))],
    "foreign .json.gz truncated": lambda d: ["stats", text(d, "i.trace.json.gz", gzip.compress(
        (EX / "interop" / "iket_twin" / "iket_pid_0x217.trace.json").read_bytes())[:300])],
    # --- pc2region
    "cubin empty": lambda d: ["pc2region", text(d, "k.cubin", b"")],
    "cubin random": lambda d: ["pc2region", text(d, "k.cubin", np.random.default_rng(4).bytes(4096))],
    "cubin text": lambda d: ["pc2region", text(d, "k.cubin", "not an ELF\n")],
    "cubin truncated ELF": lambda d: ["pc2region", text(d, "k.cubin", cubin_head(64))],
    "cubin half": lambda d: ["pc2region", text(d, "k.cubin", cubin_head(len(cubin_head(10**9)) // 2))],
    "pc2region --names not JSON": lambda d: ["pc2region", PC / "tiles_real_ncu.cubin", "--names",
                                             text(d, "n.json", "{")],
    "pc2region --marker-table wrong shape": lambda d: ["pc2region", PC / "tiles_real_ncu.cubin", "--marker-table",
                                                       text(d, "m.json", '[[1, 2, 3]]')],
    "pc2region --kernel not there": lambda d: ["pc2region", PC / "tiles_real_ncu.cubin", "--kernel", "no_such"],
    # --- join
    "join map not JSON": lambda d: ["join", "--map", text(d, "m.json", "{"), "--ncu", PC / "tiles_real_ncu.csv"],
    "join map wrong shape": lambda d: ["join", "--map", text(d, "m.json", '{"a": 1}'), "--ncu",
                                       PC / "tiles_real_ncu.csv"],
    "join map binary": lambda d: ["join", "--map", text(d, "m.json", b"\x00\xff" * 50), "--ncu",
                                  PC / "tiles_real_ncu.csv"],
    "join ncu empty": lambda d: ["join", "--map", PC / "tiles_real_ncu.map.json", "--ncu", text(d, "s.csv", "")],
    "join ncu garbage": lambda d: ["join", "--map", PC / "tiles_real_ncu.map.json", "--ncu",
                                   text(d, "s.csv", "a,b\n1,2\n\x00\x01")],
    "join ncu cut short": lambda d: ["join", "--map", PC / "tiles_real_ncu.map.json", "--ncu", text(
        d, "s.csv", "\n".join((PC / "tiles_real_ncu.csv").read_text().splitlines()[:30]))],
    "join cupti wrong format": lambda d: ["join", "--map", PC / "tiles_real_cupti.map.json", "--cupti",
                                          text(d, "c.json", '{"format": "x"}')],
    "join cupti gzip bomb": lambda d: ["join", "--map", PC / "tiles_real_cupti.map.json", "--cupti",
                                       bomb(d, "c.json.gz")],
    "join nvbit garbage": lambda d: ["join", "--map", PC / "tiles_real_ncu.map.json", "--nvbit",
                                     text(d, "n.json", "[{]")],
    "join --trace bad capture": lambda d: ["join", "--map", PC / "tiles_real_ncu.map.json", "--ncu",
                                           PC / "tiles_real_ncu.csv", "--trace", text(d, "b.npy", "x")],
    # --- diff, merge, plot, report, view
    "diff one path": lambda d: ["diff", capture(d)],
    "diff second capture bad": lambda d: ["diff", capture(d), text(d, "b.npy", "x")],
    "diff nothing in common with a gate": lambda d: ["diff", capture(d), EX / "pipelines" / "fa4_sm90_signals.npy",
                                                     "--fail-above", "5", "-o", "d.json"],
    "merge --clock-offset malformed": lambda d: ["merge", capture(d), "--clock-offset", "x=y", "-o", "m.json"],
    "merge a bad capture among good": lambda d: ["merge", EX / "insight" / "launch_0.npy", text(d, "b.npy", "x"),
                                                 "-o", "m.json"],
    "stats folder without captures": lambda d: ["stats", _mkdir(d / "empty")],
    "stats folder with a bad capture": lambda d: ["stats", _folder_with_bad(d)],
    "report --source missing": lambda d: ["report", capture(d), "--source", d / "nope.py", "-o", "r.html"],
    "report --map bad": lambda d: ["report", capture(d), "--map", text(d, "m.json", "[]"), "-o", "r.html"],
    "report --cubin random": lambda d: ["report", capture(d), "--cubin", text(d, "k.cubin", b"\x7fELF" + b"\0" * 60),
                                        "-o", "r.html"],
    "view random .pftrace": lambda d: ["view", text(d, "r.pftrace", np.random.default_rng(5).bytes(2048)),
                                       "--no-browser"],
    "view .json not a trace": lambda d: ["view", text(d, "t.json", '{"a": 1}'), "--no-browser"],
    "view missing": lambda d: ["view", d / "missing.pftrace", "--no-browser"],
    "view empty folder": lambda d: ["view", _mkdir(d / "empty"), "--no-browser"],
    "view gzip bomb": lambda d: ["view", bomb(d, "b.json.gz"), "--no-browser"],
    # --- outputs
    "output directory missing": lambda d: ["decode", capture(d), "-o", d / "no" / "t.pftrace"],
    "output is a directory": lambda d: ["decode", capture(d), "-o", _mkdir(d / "out.pftrace")],
    "output over the input": lambda d: ["stats", capture(d), "-o", d / "cap.npy"],
    "output over the sidecar": lambda d: ["report", capture(d), "-o", d / "cap.json"],
    "output unknown extension": lambda d: ["decode", capture(d), "-o", "t.txt"],
    "output named twice": lambda d: ["decode", capture(d), "-o", "t.json", "--loss-json", "t.json"],
    "output a device with -f": lambda d: ["stats", capture(d), "-o", _device(d), "-f"],
    "output a FIFO with -f": lambda d: ["stats", capture(d), "-o", _fifo(d), "-f"],
    "output a symlink to /dev/null": lambda d: ["decode", capture(d), "--loss-json", _link_to(d, os.devnull), "-f"],
    "plot onto a file": lambda d: ["plot", capture(d), "-o", text(d, "plots", "a file")],
    # --- numbers and flags
    "stats --bins huge": lambda d: ["stats", capture(d), "--bins", str(10**12)],
    "stats --top-gaps negative": lambda d: ["stats", capture(d), "--top-gaps", "-1"],
    "kernels --bins huge": lambda d: ["kernels", EX / "insight" / "torch_trace.json.gz", "--no-cache", "--bins",
                                      str(10**12)],
    "plot --bins huge": lambda d: ["plot", capture(d), "-o", "plots", "--bins", str(10**11)],
    "decode --write-stride huge": lambda d: ["decode", capture(d, side=False), "--write-stride", str(10**30)],
    "decode --write-stride zero": lambda d: ["decode", capture(d), "--write-stride", "0"],
    "waits --max-blocks zero": lambda d: ["waits", EX / "pipelines" / "fa4_sm90_signals.npy", "--max-blocks", "0"],
    "waits --cluster huge": lambda d: ["waits", EX / "pipelines" / "fa4_sm90_signals.npy", "--cluster", str(10**12)],
    "view --port out of range": lambda d: ["view", capture(d), "--port", "70000", "--no-browser"],
    "diff --alpha 2": lambda d: ["diff", capture(d), capture(d, "b"), "--alpha", "2"],
    "merge --max-lanes zero": lambda d: ["merge", capture(d), "-o", "m.json", "--max-lanes", "0"],
    "--max-decompressed not a size": lambda d: ["kernels", EX / "insight" / "torch_trace.json.gz",
                                                "--max-decompressed", "lots"],
    "glossary unknown term": lambda d: ["glossary", "no such term"],
    # --- flags across ranks, export
    "flags: a signal without its value": lambda d: ["waits", _ranks(d, flags=[{"id": 1, "kind": "signal"}])],
    "flags: order outside the set": lambda d: ["waits", _ranks(d, flags=_spoil_flag("order", "seq_cst"))],
    "flags: an id past the user ids": lambda d: ["waits", _ranks(d, flags=_spoil_flag("id", 2**20))],
    "flag_buffers: bytes zero": lambda d: ["waits", _ranks(d, flag_buffers=[{"name": "f", "owner_rank": 0,
                                                                               "base": 0, "bytes": 0,
                                                                               "elem_bytes": 4}])],
    "clock_error_ns negative": lambda d: ["waits", _ranks(d, clock_error_ns=-1)],
    "export into an existing folder": lambda d: ["export", FLAG_RANKS, "-o", _mkdir(d / "tables"), "-f"],
    "export a folder without captures": lambda d: ["export", _mkdir(d / "empty"), "-o", "tables"],
    "merge --torch into .pftrace": lambda d: ["merge", capture(d), "--torch", EX / "insight" / "torch_trace.json.gz",
                                              "-o", "m.pftrace"],
}


def _claims_more() -> bytes:
    """A capture whose header says 100 times as many slots as its data holds."""
    raw = real_npy_bytes()
    end = raw.index(b"\n") + 1
    head = raw[:end].decode("latin1")
    n = head.split("'shape': (")[1].split(",")[0]
    grown = head.replace(f"({n},)", f"({int(n) * 100},)").replace("  \n", "\n")
    return grown.encode("latin1") + raw[end:]


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


def _npz(d: Path) -> Path:
    np.savez(d / "z.npz", a=np.zeros(3))
    (d / "z.npz").rename(d / "z.npy")
    return d / "z.npy"


def _loop(d: Path) -> Path:
    (d / "a.npy").symlink_to(d / "b.npy")
    (d / "b.npy").symlink_to(d / "a.npy")
    return d / "a.npy"


def _dangling(d: Path) -> Path:
    (d / "gone.npy").symlink_to(d / "never-there.npy")
    return d / "gone.npy"


def _socket(d: Path) -> Path:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(d / "s.npy"))
    s.close()
    return d / "s.npy"


def _device(d: Path) -> Path:
    import stat

    try:
        os.mknod(d / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        return Path(os.devnull)
    return d / "null"


def _fifo(d: Path) -> Path:
    os.mkfifo(d / "out.fifo")
    return d / "out.fifo"


def _link_to(d: Path, target: str) -> Path:
    (d / "loss.json").symlink_to(target)
    return d / "loss.json"


def _ranks(d: Path, **changes) -> Path:
    """A copy of the four-rank flag fixture whose rank 1 sidecar has `changes`."""
    f = d / "ranks"
    shutil.copytree(FLAG_RANKS, f)
    side = json.loads((f / "rank_1.json").read_text())
    side.update(changes)
    (f / "rank_1.json").write_text(json.dumps(side))
    return f


def _spoil_flag(key: str, value) -> list:
    """The fixture's flag sites with the first one's `key` set to `value`."""
    flags = json.loads((FLAG_RANKS / "rank_1.json").read_text())["flags"]
    flags[0][key] = value
    return flags


def _folder_with_bad(d: Path) -> Path:
    f = _mkdir(d / "session")
    capture(f, "a")
    text(f, "b.npy", "not a capture")
    return f


# ------------------------------------------------------------------------------------------- running

def run_case(name: str, d: Path) -> tuple[bool, str]:
    """(refused cleanly, why not / the error line) of one case run in folder `d`."""
    argv = [str(a) for a in CASES[name](d)]
    before = {p.name for p in d.iterdir()}
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    env.pop("DISPLAY", None)
    try:
        r = subprocess.run([sys.executable, "-c", RUNNER.format(limit=MEMORY_LIMIT), *argv], cwd=d, env=env,
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return False, "timed out (120 s)"
    lines = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("next: ")]
    last = lines[-1] if lines else ""
    after = {p.name for p in d.iterdir()}
    if r.returncode not in (1, 2):
        return False, f"exit {r.returncode}: {r.stderr[-1500:]}"
    if "Traceback" in r.stderr or "MemoryError" in r.stderr:
        return False, f"traceback: {r.stderr[-1500:]}"
    if not (last.startswith(f"ikp {argv[0]}: error: ") or last.startswith("ikp: error: ")
            or (r.returncode == 1 and last.startswith(f"ikp {argv[0]}: "))):
        return False, f"no one-line error last: {r.stderr[-1500:]}"
    extra = sorted(after - before)
    if extra:
        return False, f"left behind: {extra}"
    return True, last


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_refused_cleanly(name, tmp_path):
    clean, why = run_case(name, tmp_path)
    assert clean, f"{name}: {why}"


def test_the_count():
    assert len(CASES) >= 120


if __name__ == "__main__":  # the count for a report: kinds tried / refused cleanly
    import tempfile

    bad = []
    for case in sorted(CASES):
        with tempfile.TemporaryDirectory() as folder:
            ok, why = run_case(case, Path(folder))
        if not ok:
            bad.append((case, why.splitlines()[-1] if why else ""))
    print(f"{len(CASES)} kinds of bad input tried, {len(CASES) - len(bad)} refused cleanly")
    for case, why in bad:
        print(f"  NOT CLEAN {case}: {why}")

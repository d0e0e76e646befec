"""Output files of every `ikp` command: complete or absent, never over an input.

Invariants (each guarded by tests/unit/host_decode/cli/test_cli_safety.py):
- An output never resolves, by path or by inode (hard links, symlinks), to one of the command's inputs
  or an input's sidecar (BUFFER.npy <-> BUFFER.json, TRACE -> TRACE.ikpcache.npz): `OutputError`. A
  capture's sidecar is `sidecar_of(capture)`, the one file the decoder reads (cap.bin -> cap.json too),
  and an input reached through a symlink also protects the sidecars of the file it points to.
- A command run from the CLI treats SIGTERM like Ctrl-C (`terminate_as_interrupt`), so a killed job
  leaves no temporary behind either.
- Every output is written to a temporary file in its target directory and renamed into place only when
  the whole command succeeded; on any failure (full disk, Ctrl-C, a bug) the temporaries are removed and
  a previous file of that name is left untouched.
- An existing output is replaced only with `force=True` (`-f/--force`); the error says so.
- Outputs are regular files (or a new folder): a device, FIFO or socket named as an output, or a symlink
  to one, is refused even with `force` (`special_kind`; tests/unit/host_decode/core/test_special_outputs.py).
- A missing output directory is an error (never created silently).

How a command uses it (new commands must do the same; `host_decode.cli.common.outputs` builds one from
the parsed arguments):

    with OutputFiles(inputs=[args.capture], force=args.force) as out:
        tmp = out.add(args.output)       # checked now, before any slow work; a temp path, same suffixes
        write_something(tmp)
    # here every added output is in place; after an exception none is
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
from pathlib import Path
from typing import Iterable

TEMP_PREFIX = ".ikp-tmp-"
CACHE_SUFFIX = ".ikpcache.npz"  # torch trace cache, host_decode.torch_traces


class OutputError(ValueError):
    """An output that would destroy data or cannot be written; names the path and what to do."""


NUMPY_MAGIC = b"\x93NUMPY"


def sidecar_of(capture: str | os.PathLike) -> Path:
    """The sidecar of a capture: its name with the suffix replaced by .json, whatever the suffix
    (cap.npy, cap.bin, CAP.NPY -> CAP.json). The one definition: host_decode.load.sidecar.read_sidecar
    reads exactly this file, and outputs never replace it."""
    return Path(capture).with_suffix(".json")


def _is_capture(p: Path) -> bool:
    """Named like a capture (*.npy, any case) or holding numpy data (cap.bin): a file whose sidecar the
    decoder reads. Other inputs (prof.csv, kernel.cubin) keep their .json twin writable."""
    if p.suffix.lower() == ".npy":
        return True
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            return False  # a pipe (--names <(...)) must not lose its first bytes to this look, nor block
        with open(p, "rb") as f:
            return f.read(len(NUMPY_MAGIC)) == NUMPY_MAGIC
    except OSError:
        return False


def sidecars(path: str | os.PathLike) -> list[Path]:
    """Files that travel with an input: a capture's sidecar (sidecar_of), a sidecar's BUFFER.npy, a torch
    trace's cache; for an input reached through a symlink, those of the file it points to as well (the
    decoder reads link.json, the real capture's own sidecar is the user's data)."""
    given, out = Path(path), []
    for p in dict.fromkeys((given.absolute(), _real(given))):
        out.append(Path(str(p) + CACHE_SUFFIX))
        if p.suffix == ".json":
            out.append(p.with_suffix(".npy"))
        elif _is_capture(p):
            out.append(sidecar_of(p))
    return out


def expand_inputs(paths: Iterable[str | os.PathLike | None]) -> list[Path]:
    """Inputs as files: a directory (a session) stands for the captures (*.npy) directly inside it, as
    host_decode.load.inputs.load_launches reads it (their sidecars follow from sidecars())."""
    files: list[Path] = []
    for p in paths:
        if p is None:
            continue
        p = Path(p)
        if p.is_dir():
            files.extend(q for q in p.glob("*.npy") if q.is_file())
        else:
            files.append(p)
    return files


SPECIAL_KINDS = (
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
)


def special_kind(p: str | os.PathLike) -> str | None:
    """What `p` is when it is, or links to, a device, FIFO or socket (never an output); else None."""
    for look in (os.lstat, os.stat):
        try:
            mode = look(p).st_mode
        except OSError:
            continue
        for test, kind in SPECIAL_KINDS:
            if test(mode):
                return kind
    return None


def refuse_special(path: str | os.PathLike) -> None:
    kind = special_kind(path)
    if kind is not None:
        raise OutputError(f"{path}: is a {kind}; ikp writes only regular files (and folders), and -f/--force "
                          "replaces only those; name a file")


def _real(p: Path) -> Path:
    """`p` with its symlinks followed, as far as they go (a loop is left as it is: never an exception)."""
    return Path(os.path.realpath(p))


def _identity(p: Path) -> tuple[int, int] | None:
    try:
        st = p.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


class OutputFiles:
    """The outputs of one command, written all-or-nothing (see the module docstring)."""

    def __init__(self, inputs: Iterable[str | os.PathLike | None] = (), *, force: bool = False):
        self.force = force
        self._protected: dict[Path, str] = {}
        self._inodes: dict[tuple[int, int], str] = {}
        for f in expand_inputs(inputs):
            self._protect(f, f"an input ({f})")
            for s in sidecars(f):
                self._protect(s, f"the sidecar of input {f}")
        self._pending: list[tuple[Path, Path]] = []  # (temporary, final)

    def _protect(self, p: Path, why: str) -> None:
        self._protected.setdefault(_real(p), why)
        ident = _identity(p)
        if ident is not None:
            self._inodes.setdefault(ident, why)

    def _refuse_inputs(self, path: str | os.PathLike) -> None:
        """OutputError when `path` is an input or an input's sidecar (by path or by inode)."""
        final = Path(path)
        why = self._protected.get(_real(final)) or self._inodes.get(_identity(final) or (-1, -1))
        if why is not None:
            raise OutputError(f"{path}: refusing to write over {why}; choose another output name")

    def check(self, path: str | os.PathLike) -> Path:
        """The final path of an output after every refusal rule (OutputError otherwise)."""
        final = Path(path)
        if str(path) in ("", "-"):
            raise OutputError("no output file named (give -o FILE)")
        self._refuse_inputs(path)
        refuse_special(path)
        resolved = _real(final)
        if any(resolved == _real(f) for _, f in self._pending):
            raise OutputError(f"{path}: named twice as an output of this command")
        parent = resolved.parent
        if not parent.is_dir():
            raise OutputError(f"{path}: output directory {parent} does not exist (create it first)")
        if final.is_dir():
            raise OutputError(f"{path}: is a directory; name a file")
        if final.exists() and not self.force:
            raise OutputError(f"{path}: exists; use -f/--force to replace it")
        if not os.access(parent, os.W_OK):
            raise OutputError(f"{path}: output directory {parent} is not writable")
        return final

    def add(self, path: str | os.PathLike) -> Path:
        """Check `path` now and return the temporary path to write it to (same directory, same
        suffixes, so writers that pick the format from the name behave alike). The temporary is
        created empty here: a directory that cannot be written fails now, naming `path`."""
        final = self.check(path)
        tmp = self._temp(final)
        try:
            open(tmp, "xb").close()
        except OSError as e:
            raise OutputError(f"{path}: cannot write in {_real(final).parent} ({e.strerror or e})") from None
        self._pending.append((tmp, final))
        return tmp

    def add_new_dir(self, path: str | os.PathLike) -> Path:
        """A new output directory, built under a temporary name and renamed into place on success. An
        existing file of that name is refused now, even with force: no directory can be renamed onto it,
        and finding that out after the slow work would waste it."""
        if Path(path).is_symlink() or (Path(path).exists() and not Path(path).is_dir()):
            self._refuse_inputs(path)
            refuse_special(path)
            raise OutputError(f"{path}: exists and is not a directory; name a new directory or an existing one")
        if Path(path).is_dir():
            self._refuse_inputs(path)
            raise OutputError(f"{path}: a folder of that name exists; name a new one (a folder is never written "
                              "over, even with -f)")
        final = self.check(path)
        tmp = self._temp(final)
        try:
            tmp.mkdir()
        except OSError as e:
            raise OutputError(f"{path}: cannot write in {_real(final).parent} ({e.strerror or e})") from None
        self._pending.append((tmp, final))
        return tmp

    @staticmethod
    def _temp(final: Path) -> Path:
        # os.urandom, not secrets.token_hex: the same 8 hex digits without importing OpenSSL (hmac,
        # _hashlib: ~10 ms at the start of every command that writes a file)
        return final.parent / f"{TEMP_PREFIX}{os.urandom(4).hex()}-{final.name}"

    def add_dir(self, path: str | os.PathLike, names: Iterable[str]) -> dict[str, Path]:
        """Outputs named `names` inside directory `path` (which must exist): {name: temporary path}."""
        d = Path(path)
        if not d.is_dir():
            if d.exists():
                raise OutputError(f"{path}: not a directory")
            raise OutputError(f"{path}: output directory does not exist (create it first)")
        return {n: self.add(d / n) for n in names}

    def commit(self) -> list[Path]:
        """Rename every temporary into place (each rename is atomic); returns the final paths."""
        done = []
        for tmp, final in self._pending:
            if not tmp.exists():
                raise OutputError(f"{final}: the command produced no output (internal error)")
        for tmp, final in self._pending:
            os.replace(tmp, final)
            done.append(final)
        self._pending = []
        return done

    def abort(self) -> None:
        """Remove every temporary (nothing of this command is left behind)."""
        for tmp, _ in self._pending:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                try:
                    tmp.unlink()
                except FileNotFoundError:
                    pass
        self._pending = []

    def __enter__(self) -> "OutputFiles":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            try:
                self.commit()
            except BaseException:
                self.abort()
                raise
            return False
        temps = {str(t): f for t, f in self._pending}
        self.abort()
        if isinstance(exc, OSError) and temps and (exc.filename is None or str(exc.filename) in temps):
            # a failed write (a full disk has no file name in the error): name the outputs, not temporaries
            finals = [temps[str(exc.filename)]] if exc.filename is not None else list(temps.values())
            names = ", ".join(str(f) for f in finals)
            raise OutputError(f"{names}: write failed ({exc.strerror or exc}); nothing was written and any "
                              "previous file of that name is untouched") from exc
        return False


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM (timeout, Slurm, systemd) raises KeyboardInterrupt like Ctrl-C while inside, so the
    OutputFiles of a killed command remove their temporaries; main thread only (signal handlers can be
    set nowhere else), the previous handler restored on leaving."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    main_thread = True
    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (checked this way: importing threading costs every command)
        main_thread = False
    if not main_thread:  # yielded outside the except, so the command's own errors do not chain to it
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def write_text(path: str | os.PathLike, text: str, *, inputs: Iterable = (), force: bool = False) -> Path:
    """One text output, atomically, under the rules above."""
    with OutputFiles(inputs, force=force) as out:
        out.add(path).write_text(text, encoding="utf-8")
    return Path(path)

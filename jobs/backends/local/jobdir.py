"""A local job's directory, ``<work_dir>/job-<id>-<random>``: the files in it are the
job's whole state (the package's docstring lists them). What is read and written here,
by the backend and the supervisor alike: JSON files replaced atomically (``write_json``,
``read_json``), the command's output read as whole lines from a cursor (``read_lines``,
capped per call and per line), and the GPU samples written since the last read
(``read_new_gpu_samples``). Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

ENDED_STATES = ("succeeded", "failed", "cancelled")

# Logs: at most this many lines per call, each at most this many bytes.
MAX_LINES_PER_CALL = 2000
MAX_LINE_BYTES = 8192
_READ_CHUNK_BYTES = 1024 * 1024
_MAX_READ_BYTES_PER_CALL = 16 * 1024 * 1024
MAX_GPU_SAMPLES_PER_CALL = 1000


def log_cursor(offset: int, skipping: bool) -> dict:
    return {"offset": offset, "skipping": True} if skipping else {"offset": offset}


def read_lines(log_file, offset: int, skipping: bool, ended: bool) -> tuple[list[str], int, bool]:
    """Whole lines from ``offset``: a partial last line waits for its end (or for the
    job's end). ``skipping``: the head of an over-long line was already given, the rest
    up to its newline is dropped."""
    lines: list[str] = []
    read_bytes = 0
    while len(lines) < MAX_LINES_PER_CALL and read_bytes < _MAX_READ_BYTES_PER_CALL:
        log_file.seek(offset)
        data = log_file.read(_READ_CHUNK_BYTES)
        if not data:
            break
        read_bytes += len(data)
        position = 0
        while len(lines) < MAX_LINES_PER_CALL:
            newline = data.find(b"\n", position)
            if newline == -1:
                break
            if skipping:
                skipping = False
            else:
                lines.append(_decode_line(data[position:newline]))
            position = newline + 1
        offset += position
        rest = data[position:]
        if len(lines) >= MAX_LINES_PER_CALL or not rest:
            continue
        at_end = len(data) < _READ_CHUNK_BYTES
        if skipping:
            offset += len(rest)
        elif len(rest) > MAX_LINE_BYTES:
            # A line too long to wait for (a progress bar that never ends its line):
            # give its head now and drop the rest of it.
            lines.append(_decode_line(rest))
            offset += len(rest)
            skipping = True
        elif at_end:
            if ended:
                lines.append(_decode_line(rest))
                offset += len(rest)
            break
    return lines, offset, skipping


def _decode_line(raw: bytes) -> str:
    # A carriage return rewrites the line on a terminal (progress bars): keep what the
    # terminal would show last.
    if b"\r" in raw:
        raw = next((piece for piece in reversed(raw.split(b"\r")) if piece), b"")
    if len(raw) > MAX_LINE_BYTES:
        return raw[:MAX_LINE_BYTES].decode("utf-8", "replace") + " … [line truncated]"
    return raw.decode("utf-8", "replace")


def read_new_gpu_samples(job_dir: Path) -> list[dict]:
    """GPU samples written since the last call (the read position is kept in the job's
    directory, under a lock, so two pollers never return the same sample)."""
    samples_path = job_dir / "gpu.jsonl"
    if not samples_path.exists():
        return []
    import fcntl

    samples: list[dict] = []
    with open(job_dir / "gpu.offset", "a+") as position_file:
        fcntl.flock(position_file, fcntl.LOCK_EX)
        position_file.seek(0)
        text = position_file.read().strip()
        offset = int(text) if text.isdigit() else 0
        with open(samples_path, "rb") as samples_file:
            samples_file.seek(offset)
            for raw in samples_file:
                if not raw.endswith(b"\n") or len(samples) >= MAX_GPU_SAMPLES_PER_CALL:
                    break
                offset += len(raw)
                with contextlib.suppress(ValueError):
                    samples.append(json.loads(raw))
        position_file.seek(0)
        position_file.truncate()
        position_file.write(str(offset))
    return samples


def write_json(path: Path, data: dict) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return None

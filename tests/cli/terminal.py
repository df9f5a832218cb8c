"""A pseudo-terminal for end-to-end tests of the client's console scripts (only the
standard library: ``pty``, ``os``): the program runs as the session leader of a new
terminal, so ^C typed in it is SIGINT from the terminal's line discipline, as when a
person presses Ctrl-C; it starts with the signal dispositions a shell's foreground job
has, whatever the test run inherited. ``expect`` waits for text in what it printed (a
hang guard, not a speed check)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import tomllib
from pathlib import Path

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"
#: How long ``expect`` waits for anything (a loaded 2-core CI machine can be slow).
WAIT_SECONDS = 60.0
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")


def console_script(name: str, directory: Path) -> Path:
    """The console script ``name`` as an installer writes it from cli/pyproject.toml's
    ``[project.scripts]`` (``module:function``), run by this interpreter."""
    target = tomllib.loads((CLI_DIR / "pyproject.toml").read_text())["project"]["scripts"][name]
    module, function = target.split(":")
    path = directory / name
    path.write_text(
        f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\n"
        f"if __name__ == '__main__':\n    sys.exit({function}())\n"
    )
    path.chmod(0o755)
    return path


#: Signals a shell gives their default action when it starts a foreground job: a test run
#: started in the background (``make test &``, nohup) ignores SIGINT and SIGQUIT, and a
#: program inherits what its parent ignores, so ^C would do nothing in it.
SHELL_DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM, signal.SIGTSTP)


def _controlling_terminal() -> None:  # in the child, before exec
    for number in SHELL_DEFAULT_SIGNALS:
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str]):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "PYTHONPATH": str(CLI_DIR), "TERM": "dumb", "PYTHONUNBUFFERED": "1"},
            preexec_fn=_controlling_terminal,  # noqa: PLW1509 - setsid and the terminal, then exec
            close_fds=True,
        )
        os.close(slave)
        self.text = ""
        self.seen = 0  # what expect has consumed
        self.lock = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the program closed the terminal
                data = b""
            with self.lock:
                if not data:
                    self.lock.notify_all()
                    return
                self.text += ANSI.sub("", data.decode("utf-8", "replace")).replace("\r", "")
                self.lock.notify_all()

    def expect(self, pattern: str, timeout: float = WAIT_SECONDS) -> re.Match:
        """Wait for ``pattern`` (a regex) after what the previous expect matched."""
        compiled = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                match = compiled.search(self.text, self.seen)
                if match:
                    self.seen = match.end()
                    return match
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (not self.reader.is_alive() and not compiled.search(self.text, self.seen)):
                    raise AssertionError(
                        f"{pattern!r} did not show within {timeout:g} s; the terminal after the last match:\n"
                        f"{self.text[self.seen :][-3000:]}"
                    )
                self.lock.wait(min(remaining, 0.5))

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def line(self, text: str) -> None:
        self.type(text + "\r")

    def ctrl_c(self) -> None:
        self.type("\x03")

    def wait(self, timeout: float = WAIT_SECONDS) -> int:
        code = self.process.wait(timeout=timeout)
        self.reader.join(timeout=5)
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        os.close(self.master)

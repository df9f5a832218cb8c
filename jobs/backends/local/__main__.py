"""``python -m jobs.backends.local run <job dir>``: start a local job's supervisor
(``supervisor.launch``), as ``LocalBackend.submit`` does. Standard library only."""

import sys
from pathlib import Path

from jobs.backends.local.supervisor import launch

if len(sys.argv) != 3 or sys.argv[1] != "run":
    sys.exit("usage: python -m jobs.backends.local run <job dir>")
sys.exit(launch(Path(sys.argv[2])))

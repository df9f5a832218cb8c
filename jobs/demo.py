"""Jobs demo data: a local compute backend for the demo organization and a small
command job on it, which the workers run as soon as they start (make run), so a new
user sees a job's timeline and its log lines arrive. The job runs as JOBS_LOCAL_USER
(``nobody`` when ``make run`` runs as root), with the host's ``python3``."""

from __future__ import annotations

from django.conf import settings

from jobs.models import ComputeBackend, Job
from jobs.services import backend_create, job_submit

DEMO_BACKEND = "this machine"
DEMO_SCRIPT = (
    "import time\n"
    "for step in range(1, 11):\n"
    "    print(f'demo job: step {step}/10', flush=True)\n"
    "    time.sleep(1)\n"
    "print('demo job: done', flush=True)\n"
)


def demo_jobs_seed(*, project, actor=None) -> int:
    """Add the local backend and the demo job unless the backend exists; return how
    many jobs were submitted (0 when the local backend is turned off)."""
    if not settings.JOBS_LOCAL_BACKEND:
        return 0
    if ComputeBackend.objects.filter(organization_id=project.organization_id, name=DEMO_BACKEND).exists():
        return 0
    backend = backend_create(organization=project.organization, actor=actor, name=DEMO_BACKEND, kind="local")
    job_submit(
        project=project,
        actor=actor,
        backend=backend,
        hardware="cpu-basic",
        name="Demo job: ten steps on this machine",
        command=["python3", "-c", DEMO_SCRIPT],
        time_limit_seconds=300,
    )
    return Job.objects.filter(project=project).count()

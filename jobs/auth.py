"""Authentication of evaluation jobs: ``Authorization: Bearer aoj_<job id>_<secret>``.

A job token opens exactly two endpoints, its own job's items and results (the views
check the job in the URL is the token's), and stops working when the job ends."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from jobs.services import TOKEN_PREFIX, job_for_token, token_live


class JobPrincipal:
    """The ``request.user`` of a request made with a job token."""

    is_authenticated = True
    is_anonymous = False
    pk = None

    def __init__(self, job):
        self.job = job

    def __str__(self) -> str:
        return f"job {self.job.pk}"


class JobTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if len(header) != 2 or header[0].lower() != b"bearer":
            raise exceptions.AuthenticationFailed("send the job's token: 'Authorization: Bearer <AGENTOPS_JOB_TOKEN>'")
        raw = header[1].decode(errors="replace")
        if not raw.startswith(TOKEN_PREFIX):
            raise exceptions.AuthenticationFailed(
                "this endpoint takes a job token (AGENTOPS_JOB_TOKEN), not an API key"
            )
        job = job_for_token(raw)
        if job is None:
            raise exceptions.AuthenticationFailed("the job token is not valid")
        if not token_live(job):
            raise exceptions.AuthenticationFailed(f"the job token has expired: the job {job.status}")
        return JobPrincipal(job), job

    def authenticate_header(self, request):
        return f'{self.keyword} realm="job"'

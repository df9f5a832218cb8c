"""Deciding a run's approvals from its page: approve (optionally with edited arguments)
or reject a pending tool call, after which the run goes back to a worker.

The approval is looked up in the URL's project and run, so another tenant's id is a 404
like a missing one; the service's errors (already decided, expired) are shown as a
message, never as a 500.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect

from agentops import jsonsafe
from agentops.errors import ServiceError
from agentops.pages import Need, ProjectPage
from runs import selectors
from runs.models import Approval
from runs.services.approvals import approval_decide


class RunApprovalDecideAction(ProjectPage):
    """The form of one pending approval in the run's header: ``decision`` is "approve"
    or "reject"; ``arguments`` (a JSON object) replaces the call's arguments when
    approving, ``reason`` is kept with a rejection."""

    permissions = {"POST": Need("work:write", "decide approvals")}

    def post(self, request, org_slug, project_slug, run_id, approval_id):
        run = selectors.run_detail(project=self.project, run_id=run_id)
        approval = Approval.objects.filter(project=self.project, run=run, pk=approval_id).first()
        if approval is None:
            raise Http404("approval not found")
        back = redirect("runs:detail", org_slug=org_slug, project_slug=project_slug, run_id=run_id)
        decision = request.POST.get("decision")
        if decision not in ("approve", "reject"):
            messages.error(request, "Choose to approve or reject the call; nothing was decided.")
            return back
        approve = decision == "approve"
        arguments = None
        if approve:
            text = request.POST.get("arguments", "").strip()
            if text:
                try:
                    arguments = jsonsafe.loads(text)
                except ValueError as exc:
                    messages.error(request, f"The edited arguments are not valid JSON ({exc}); nothing was decided.")
                    return back
                if not isinstance(arguments, dict):
                    messages.error(request, "The edited arguments must be a JSON object; nothing was decided.")
                    return back
                if arguments == approval.arguments:
                    arguments = None  # unchanged: approve the call as it was asked
        try:
            approval_decide(
                approval=approval,
                actor=request.user,
                approve=approve,
                arguments=arguments,
                reason=request.POST.get("reason", "").strip() if not approve else "",
                ip=self.ip,
            )
        except ServiceError as exc:
            messages.error(request, f"The call to {approval.tool_name} could not be decided: {exc.message}.")
            return back
        if not approve:
            messages.success(request, f"The call to {approval.tool_name} was rejected; the run continues.")
        elif arguments is not None:
            messages.success(request, f"The call to {approval.tool_name} was approved with edited arguments.")
        else:
            messages.success(request, f"The call to {approval.tool_name} was approved; the run continues.")
        return back

"""Agents and their API tokens: a token is issued from the agents' list and shown once there;
it is revoked, never deleted, so its row stays for the audit log."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from approvals.admin.base import AuditedAdmin, ReadOnlyInline, signed_in_user
from approvals.models import Agent, AgentToken
from approvals.selectors.grants import grants_of_agent
from approvals.services.agents import (
    agent_delete,
    agent_save,
    agent_token_issue,
    agent_token_revoke,
    agent_tokens_revoke,
)
from approvals.services.grants import GrantNotFound, grant_revoke

GRANT_REVOKED = "Grant revoked: the agent's next call of that tool is judged without it."
GRANT_GONE = "No such grant of this agent: it was revoked already."


class AgentTokenInline(ReadOnlyInline):
    model = AgentToken
    fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    show_change_link = True
    verbose_name = "API token"
    verbose_name_plural = "API tokens (issue one with the 'Issue a token' action of the list)"


@admin.register(Agent)
class AgentAdmin(AuditedAdmin):
    list_display = ("name", "principal", "mode", "active", "active_tokens", "created_at")
    list_filter = ("mode", "active")
    search_fields = ("name", "principal")
    fields = ("name", "principal", "allowed_principals", "mode", "active")
    inlines = [AgentTokenInline]
    actions = ["issue_token", "revoke_tokens"]

    @admin.display(description="active tokens")
    def active_tokens(self, obj: Agent) -> int:
        return obj.tokens.filter(revoked_at__isnull=True).count()

    def get_urls(self) -> list[URLPattern]:
        revoke = path(
            "<path:object_id>/grants/<int:grant_id>/revoke/",
            self.admin_site.admin_view(require_POST(self.revoke_grant_view)),
            name="approvals_agent_revoke_grant",
        )
        return [revoke, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The agent's grants, under its fields (templates/admin/approvals/agent/change_form.html).
        agent = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if agent is not None:
            context["grants"] = grants_of_agent(agent=agent)
            context["may_revoke"] = self.has_change_permission(request, agent)
        return super().change_view(request, object_id, form_url, context)

    def revoke_grant_view(
        self, request: HttpRequest, object_id: str, grant_id: int
    ) -> HttpResponse:
        agent = self.get_object(request, object_id)
        if agent is None:
            raise Http404
        if not self.has_change_permission(request, agent):
            raise PermissionDenied
        try:
            grant_revoke(agent=agent, grant_id=grant_id, by_user=signed_in_user(request))
        except GrantNotFound:
            messages.warning(request, GRANT_GONE)
        else:
            messages.success(request, GRANT_REVOKED)
        url = reverse(
            "admin:approvals_agent_change", args=[agent.pk], current_app=self.admin_site.name
        )
        return HttpResponseRedirect(url, status=303)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # Unticking "active" closes the agent's sockets.
        agent_save(agent=obj, by_user=signed_in_user(request))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        agent_delete(agent=obj, by_user=signed_in_user(request))  # its tokens' sockets close

    @admin.action(description="Issue a token (shown once)", permissions=["change"])
    def issue_token(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset:
            token = agent_token_issue(agent=agent, by_user=signed_in_user(request))
            # The token is ours, not typed by anyone: shown here once, then only its digest.
            messages.success(
                request,
                f"New token for agent {agent.name}: {token} — copy it now, it will not be "
                "shown again.",
            )

    @admin.action(description="Revoke all tokens", permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        by_user = signed_in_user(request)
        revoked = sum(agent_tokens_revoke(agent=agent, by_user=by_user) for agent in queryset)
        messages.success(request, f"Revoked {revoked} token{'' if revoked == 1 else 's'}.")


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("prefix", "agent", "created_at", "last_used_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("prefix", "agent__name")
    fields = ("agent", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are issued from the agents' list, where they are shown once

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: the row stays, for the audit log

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("approvals.change_agenttoken")

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        revoked = 0
        for token_row in queryset.filter(revoked_at__isnull=True):
            agent_token_revoke(token_row=token_row, by_user=signed_in_user(request))
            revoked += 1
        messages.success(request, f"Revoked {revoked} token{'' if revoked == 1 else 's'}.")

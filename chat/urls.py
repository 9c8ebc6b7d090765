from __future__ import annotations

from django.urls import include, path

from chat import (
    attachment_views,
    downloads,
    inspector,
    list_actions,
    media,
    news,
    picker,
    prompt_views,
    search,
    sharing,
    sidebar,
    views,
    windows,
)
from chat.agents import actions as agent_actions
from chat.agents import page as agent_page
from chat.agents import views as agent_views
from chat.evals.annotations import reply_annotation, tool_call_annotation
from chat.evals.saving import reply_case, tool_call_case

app_name = "chat"
urlpatterns = [
    path("", views.conversation_list, name="conversation_list"),
    path("c/new/", views.conversation_create, name="conversation_create"),
    path("agents/choose/", agent_views.agent_choices, name="agent_choices"),
    path("agents/default/", agent_views.agent_default, name="agent_default"),
    path("agents/<slug:slug>/versions/", agent_page.agent_detail, name="agent_detail"),
    path("agents/<slug:slug>/suite/", agent_page.agent_suite, name="agent_suite"),
    path(
        "agents/<slug:slug>/versions/<int:number>/evaluate/",
        agent_actions.version_evaluate,
        name="agent_version_evaluate",
    ),
    path(
        "agents/<slug:slug>/versions/<int:number>/publish/",
        agent_actions.version_publish,
        name="agent_version_publish",
    ),
    path("search/", search.conversation_search, name="conversation_search"),
    path("sidebar/<slug:part>/", sidebar.more, name="sidebar_more"),
    path("archived/", list_actions.archived, name="archived"),
    path("c/list/", list_actions.list_action, name="list_action"),
    path("c/<int:pk>/seen/", news.conversation_seen, name="conversation_seen"),
    path("evals/", include("chat.evals.urls")),
    path("c/<int:pk>/", views.conversation_detail, name="conversation_detail"),
    path("c/<int:pk>/window/", windows.conversation_window, name="conversation_window"),
    path("c/<int:pk>/changes/", agent_views.conversation_changes, name="conversation_changes"),
    path("c/<int:pk>/changes/version/", agent_views.save_version, name="conversation_save_version"),
    path("c/<int:pk>/changes/agent/", agent_views.save_agent, name="conversation_save_agent"),
    path("c/<int:pk>/settings/", views.conversation_settings, name="conversation_settings"),
    path("c/<int:pk>/prompts/", prompt_views.prompt_list, name="prompt_list"),
    path("c/<int:pk>/prompts/get/", prompt_views.prompt_get, name="prompt_get"),
    path("c/<int:pk>/model/", picker.conversation_model, name="conversation_model"),
    path("c/<int:pk>/model/list/", picker.conversation_models, name="conversation_models"),
    path("c/<int:pk>/rename/", views.conversation_rename, name="conversation_rename"),
    path("c/<int:pk>/share/", views.conversation_share, name="conversation_share"),
    path("c/<int:pk>/delete/", views.conversation_delete, name="conversation_delete"),
    path("c/<int:pk>/copy/", sharing.conversation_copy, name="conversation_copy"),
    path(
        "c/<int:pk>/download/<slug:kind>/",
        downloads.conversation_download,
        name="conversation_download",
    ),
    path("c/<int:pk>/runs/<int:run_pk>/", inspector.run_detail, name="run_detail"),
    path("c/<int:pk>/runs/<int:run_pk>/inspect/", views.run_inspect, name="run_inspect"),
    path(
        "c/<int:pk>/tool-calls/<int:tool_call_pk>/",
        views.tool_call_detail,
        name="tool_call_detail",
    ),
    path("c/<int:pk>/attachments/", attachment_views.upload, name="attachment_upload"),
    path(
        "c/<int:pk>/messages/<int:message_pk>/attachments/<int:number>/",
        attachment_views.attachment,
        name="attachment",
    ),
    path(
        "c/<int:pk>/tool-calls/<int:tool_call_pk>/media/<int:number>/",
        media.tool_call_media,
        name="tool_call_media",
    ),
    path(
        "c/<int:pk>/runs/<int:run_pk>/annotation/",
        reply_annotation,
        name="reply_annotation",
    ),
    path(
        "c/<int:pk>/tool-calls/<int:tool_call_pk>/annotation/",
        tool_call_annotation,
        name="tool_call_annotation",
    ),
    path("c/<int:pk>/runs/<int:run_pk>/case/", reply_case, name="reply_case"),
    path("c/<int:pk>/tool-calls/<int:tool_call_pk>/case/", tool_call_case, name="tool_call_case"),
    path("c/<int:pk>/messages/<int:index>/text/", views.message_text, name="message_text"),
    path("c/<int:pk>/messages/<int:index>/reply/", views.reply_text, name="reply_text"),
    path("c/<int:pk>/fork/message/<int:index>/", views.fork_message, name="fork_message"),
    path("c/<int:pk>/fork/tool/<int:tool_call_pk>/", views.fork_tool_call, name="fork_tool_call"),
]

from __future__ import annotations

from django.urls import path

from chat.evals import views

app_name = "evals"
urlpatterns = [
    path("", views.index, name="index"),
    path("sets/<int:pk>/", views.case_set_detail, name="set"),
    path("runs/<int:pk>/", views.eval_run_detail, name="run"),
    path("runs/<int:pk>/stop/", views.eval_run_stop, name="run_stop"),
    path("compare/", views.compare_start, name="compare"),
    path("compare/<int:pk>/", views.comparison_detail, name="comparison"),
    path("compare/<int:pk>/stop/", views.comparison_stop, name="comparison_stop"),
]

from django.urls import path

from webapp.dashboard.views import checkpoints, home, jobs, overview, run_new, runs
from webapp.dashboard.views import settings as project_settings

app_name = "dashboard"

urlpatterns = [
    path("", home.home, name="home"),
    path("go/", home.switch_project, name="switch_project"),
    path("settings/theme/", home.theme, name="theme"),
    path("p/<slug:slug>/", overview.project_overview, name="project"),
    path("p/<slug:slug>/search/", home.search, name="search"),
    path("p/<slug:slug>/checkpoints/", checkpoints.checkpoint_list_page, name="checkpoint_list"),
    path("p/<slug:slug>/checkpoints/<int:checkpoint_id>/promote/", checkpoints.checkpoint_promote_page,
         name="checkpoint_promote"),
    path("p/<slug:slug>/checkpoints/<int:checkpoint_id>/download/", checkpoints.checkpoint_download,
         name="checkpoint_download"),
    path("p/<slug:slug>/checkpoints/<int:checkpoint_id>/export/", checkpoints.checkpoint_export,
         name="checkpoint_export"),
    path("p/<slug:slug>/checkpoints/<int:checkpoint_id>/export/download/", checkpoints.checkpoint_export_download,
         name="checkpoint_export_download"),
    path("p/<slug:slug>/checkpoints/aliases/<slug:name>/", checkpoints.alias_history_page, name="alias_history"),
    path("p/<slug:slug>/checkpoints/aliases/<slug:name>/rollback/", checkpoints.alias_rollback_view,
         name="alias_rollback"),
    path("p/<slug:slug>/runs/", runs.run_list_page, name="run_list"),
    path("p/<slug:slug>/runs/new/", run_new.run_new, name="run_new"),
    path("p/<slug:slug>/runs/compare/", runs.run_compare_page, name="run_compare"),
    path("p/<slug:slug>/runs/<int:run_id>/", runs.run_detail_page, name="run_detail"),
    path("p/<slug:slug>/runs/<int:run_id>/live/", runs.run_live, name="run_live"),
    path("p/<slug:slug>/runs/<int:run_id>/cancel/", runs.run_cancel_view, name="run_cancel"),
    path("p/<slug:slug>/runs/<int:run_id>/retry/", runs.run_retry_view, name="run_retry"),
    path("p/<slug:slug>/jobs/", jobs.job_list_page, name="job_list"),
    path("p/<slug:slug>/jobs/<int:job_id>/cancel/", jobs.job_cancel, name="job_cancel"),
    path("p/<slug:slug>/jobs/<int:job_id>/retry/", jobs.job_retry_view, name="job_retry"),
    path("p/<slug:slug>/settings/", project_settings.project_settings_page, name="project_settings"),
    path("p/<slug:slug>/settings/members/add/", project_settings.member_add, name="project_settings_member_add"),
    path("p/<slug:slug>/settings/members/<int:membership_id>/role/", project_settings.member_role,
         name="project_settings_member_role"),
    path("p/<slug:slug>/settings/members/<int:membership_id>/remove/", project_settings.member_remove,
         name="project_settings_member_remove"),
    path("p/<slug:slug>/settings/price/", project_settings.price_set, name="project_settings_price"),
    path("p/<slug:slug>/settings/tokens/", project_settings.token_create, name="project_settings_token_create"),
    path("p/<slug:slug>/settings/tokens/<int:token_id>/revoke/", project_settings.token_revoke,
         name="project_settings_token_revoke"),
]

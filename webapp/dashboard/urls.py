from django.urls import path

from webapp.dashboard.views import home, jobs, overview

app_name = "dashboard"

urlpatterns = [
    path("", home.home, name="home"),
    path("go/", home.switch_project, name="switch_project"),
    path("settings/theme/", home.theme, name="theme"),
    path("p/<slug:slug>/", overview.project_overview, name="project"),
    path("p/<slug:slug>/search/", home.search, name="search"),
    path("p/<slug:slug>/jobs/", jobs.job_list_page, name="job_list"),
    path("p/<slug:slug>/jobs/<int:job_id>/cancel/", jobs.job_cancel, name="job_cancel"),
    path("p/<slug:slug>/jobs/<int:job_id>/retry/", jobs.job_retry_view, name="job_retry"),
]

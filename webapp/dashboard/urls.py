from django.urls import path

from webapp.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.home, name="home"),
    path("p/<slug:slug>/", views.project_overview, name="project"),
    path("p/<slug:slug>/jobs/", views.job_list, name="job_list"),
    path("p/<slug:slug>/jobs/<int:job_id>/cancel/", views.job_cancel, name="job_cancel"),
]

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp.api.api import api
from webapp.api.docs import protect_docs

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="registration/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # /api/docs and /api/openapi.json need a login (or a token for the schema).
    path("api/", protect_docs(api.urls)),
    path("", include("webapp.dashboard.urls")),
]

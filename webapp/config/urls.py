from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from webapp.api.api import api
from webapp.api.docs import protect_docs

urlpatterns = [
    path("favicon.ico", RedirectView.as_view(url=static("crucible/favicon.svg"), permanent=True)),
    path("login/", auth_views.LoginView.as_view(template_name="registration/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # /api/docs and /api/openapi.json need a login (or a token for the schema).
    path("api/", protect_docs(api.urls)),
    path("", include("webapp.dashboard.urls")),
]

# A body over the upload limit: 413 with the limit, not a bare 400 (webapp.dashboard.views.errors).
handler400 = "webapp.dashboard.views.errors.bad_request"

from django.contrib import admin
from django.urls import include, path

from apps.api.api import api

urlpatterns = [
    path("api/v1/", api.urls),
    path("django-admin/", admin.site.urls),
    path("", include("apps.web.urls")),
]

"""Domain errors become pages here, and only here, for the web interface."""

from __future__ import annotations

from django.shortcuts import render

from apps.core.errors import Conflict, DomainError, NotFound, PermissionDenied


class DomainErrorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, DomainError):
            return None
        status = 404 if isinstance(exception, NotFound) else 403 if isinstance(exception, PermissionDenied) \
            else 409 if isinstance(exception, Conflict) else 400
        titles = {404: "Not found", 403: "Not allowed", 409: "That conflicts with the current state", 400: "Invalid"}
        context = {"status": status, "title": titles[status], "message": exception.message}
        if request.htmx:
            # Keep the page as it is; show the message where messages go.
            response = render(request, "web/partials/_error_toast.html", context, status=status)
            response["HX-Reswap"] = "none"
            return response
        return render(request, "web/error.html", context, status=status)

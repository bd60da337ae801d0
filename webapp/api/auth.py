"""API authentication: `Authorization: Bearer cru_…` tokens, or the browser session."""

from __future__ import annotations

from ninja.security import HttpBearer, django_auth

from webapp.projects.services import api_token_authenticate


class TokenAuth(HttpBearer):
    def authenticate(self, request, token: str):
        user = api_token_authenticate(token)
        if user is not None:
            request.user = user
        return user


API_AUTH = [TokenAuth(), django_auth]

"""The OpenAPI document stays one that Swagger UI (and any YAML/JSON parser that refuses duplicate keys) reads."""

from __future__ import annotations

import json


def _duplicate_keys(body: bytes) -> list[str]:
    duplicates: list[str] = []

    def pairs_hook(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                duplicates.append(key)
            seen.add(key)
        return dict(pairs)

    json.loads(body, object_pairs_hook=pairs_hook)
    return duplicates


def test_the_openapi_document_has_no_duplicate_keys_and_documents_every_router(client, project_team):
    client.force_login(project_team["viewer"])
    response = client.get("/api/openapi.json")
    assert response.status_code == 200
    assert _duplicate_keys(response.content) == [], "an int and a str response code both became \"200\""
    paths = response.json()["paths"]
    for path in ("/api/projects/{slug}/trajectories", "/api/trajectories/{trajectory_id}/group",
                 "/api/projects/{slug}/review-queues", "/api/runs/{run_id}/failures",
                 "/api/projects/{slug}/reviews/export"):
        assert path in paths, path

"""Project settings: members and roles (owner), the price per device-hour (owner), your own API tokens."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.test import Client

from webapp.projects.models import ApiToken, AuditEvent, Membership, Project, Role
from webapp.projects.services.projects import api_token_issue, membership_set_role

MEMBERS = ["viewer", "reviewer", "editor", "owner"]
EVERYONE = [*MEMBERS, "outsider"]


def _url(slug: str, tail: str = "") -> str:
    return f"/p/{slug}/settings/{tail}"


def _body(response) -> str:
    return response.content.decode()


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def _membership(project_team, who: str) -> Membership:
    return Membership.objects.get(project=project_team["project"], user=project_team[who])


@pytest.fixture
def slug(project_team) -> str:
    return project_team["project"].slug


# ---------------------------------------------------------------------------------------
# Role matrix
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", EVERYONE)
def test_get_is_for_members_and_owners_get_the_forms(client, project_team, slug, who):
    client.force_login(project_team[who])
    response = client.get(_url(slug))
    if who == "outsider":
        assert response.status_code == 404
        return
    assert response.status_code == 200
    body = _body(response)
    for member in MEMBERS:
        assert f'data-member="{member}"' in body  # every member sees the member list
    assert 'id="token-name"' in body  # and may create tokens of their own
    owner_forms = ['id="add-username"', 'id="price-input"', "/members/add/", "/role/", "/remove/"]
    if who == "owner":
        assert all(form in body for form in owner_forms)
    else:
        assert not any(form in body for form in owner_forms)
        assert "you see them read-only" in body


def _owner_posts(project_team, slug) -> dict[str, tuple[str, dict]]:
    editor = _membership(project_team, "editor")
    return {
        "add": (_url(slug, "members/add/"), {"username": "outsider", "role": "viewer"}),
        "role": (_url(slug, f"members/{editor.pk}/role/"), {"role": "reviewer"}),
        "remove": (_url(slug, f"members/{editor.pk}/remove/"), {}),
        "price": (_url(slug, "price/"), {"price": "2.5"}),
    }


@pytest.mark.parametrize("action", ["add", "role", "remove", "price"])
@pytest.mark.parametrize("who", EVERYONE)
def test_owner_actions_role_matrix(client, project_team, slug, who, action):
    url, data = _owner_posts(project_team, slug)[action]
    client.force_login(project_team[who])
    before = AuditEvent.objects.count()
    response = client.post(url, data)
    expected = {"outsider": 404, "owner": 302}.get(who, 403)
    assert response.status_code == expected, (who, action, response.status_code)
    changed = AuditEvent.objects.count() > before
    assert changed == (who == "owner")
    project = Project.objects.get(pk=project_team["project"].pk)
    assert (project.price_per_device_hour is not None) == (who == "owner" and action == "price")


@pytest.mark.parametrize("who", EVERYONE)
def test_token_actions_are_for_every_member(client, project_team, slug, who):
    client.force_login(project_team[who])
    response = client.post(_url(slug, "tokens/"), {"name": f"{who} script"})
    assert response.status_code == (404 if who == "outsider" else 302)
    token = ApiToken.objects.filter(user=project_team[who], name=f"{who} script").first()
    assert (token is not None) == (who != "outsider")
    mine = api_token_issue(user=project_team[who], name="to revoke").token
    response = client.post(_url(slug, f"tokens/{mine.pk}/revoke/"))
    assert response.status_code == (404 if who == "outsider" else 302)
    mine.refresh_from_db()
    assert (mine.revoked_at is not None) == (who != "outsider")


def test_csrf_is_required_on_every_post(project_team, slug):
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(project_team["owner"])
    token = api_token_issue(user=project_team["owner"], name="t").token
    urls = [url for url, _ in _owner_posts(project_team, slug).values()]
    urls += [_url(slug, "tokens/"), _url(slug, f"tokens/{token.pk}/revoke/")]
    for url in urls:
        assert csrf_client.post(url, {"name": "x", "price": "1", "role": "viewer", "username": "outsider"}
                                ).status_code == 403, url
    # the page's forms carry the token
    body = _body(csrf_client.get(_url(slug)))
    assert body.count('name="csrfmiddlewaretoken"') >= body.count('method="post"') > 5


def test_get_only_on_the_page_post_only_on_the_actions(client, project_team, slug):
    client.force_login(project_team["owner"])
    assert client.post(_url(slug)).status_code == 405
    assert client.get(_url(slug, "price/")).status_code == 405
    assert client.get(_url(slug, "tokens/")).status_code == 405


def test_nav_has_settings_for_every_member(client, project_team, slug):
    client.force_login(project_team["viewer"])
    body = _body(client.get(_url(slug)))
    assert f'href="/p/{slug}/settings/" data-nav-key="s" class="active"' in body


# ---------------------------------------------------------------------------------------
# Members
# ---------------------------------------------------------------------------------------


def test_add_a_member_audited(client, project_team, slug, make_user):
    make_user("newcomer")
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, "members/add/"), {"username": "newcomer", "role": "editor"}, follow=True)
    assert response.redirect_chain[-1][0].endswith("/settings/#members")
    assert "newcomer joined Acme agents as editor." in _messages(response)
    membership = Membership.objects.get(project=project_team["project"], user__username="newcomer")
    assert membership.role == Role.EDITOR
    event = AuditEvent.objects.filter(action="membership.set_role", target_id=str(membership.pk)).get()
    assert event.actor == project_team["owner"] and event.data == {"user": "newcomer", "from": None, "to": "editor"}


def test_add_matches_a_name_that_differs_only_in_case(client, project_team, slug, make_user):
    make_user("Grace")
    client.force_login(project_team["owner"])
    assert client.post(_url(slug, "members/add/"), {"username": "grace", "role": "viewer"}).status_code == 302
    assert Membership.objects.filter(project=project_team["project"], user__username="Grace").exists()


@pytest.mark.parametrize(("username", "role", "field", "message"), [
    ("nobody-here", "viewer", "add-username", "There is no user named “nobody-here”"),
    ("editor", "viewer", "add-username", "editor is already a member (editor)"),
    ("", "viewer", "add-username", "Type the user name"),
    ("bad\x00name", "viewer", "add-username", "NUL character"),
    ("x" * 151, "viewer", "add-username", "at most 150"),
    ("outsider", "admin", "add-role", "Choose one of the roles"),
])
def test_add_errors_beside_the_field_keeping_what_was_typed(client, project_team, slug, username, role, field,
                                                            message):
    client.force_login(project_team["owner"])
    before = (Membership.objects.count(), AuditEvent.objects.count())
    response = client.post(_url(slug, "members/add/"), {"username": username, "role": role})
    assert response.status_code == 400
    body = _body(response)
    error = re.search(rf'<p class="field-error" id="{field}-error">([^<]*)</p>', body)
    assert error and message in error.group(1).replace("&amp;", "&"), body[:200]
    assert f'id="{field}" ' in body and 'aria-invalid="true" aria-describedby="' + field + '-error"' in body
    if "\x00" not in username and username:
        assert f'value="{username}"' in body  # what was typed stays in the field
    assert (Membership.objects.count(), AuditEvent.objects.count()) == before


def test_inactive_user_cannot_be_added(client, project_team, slug, make_user):
    make_user("gone", is_active=False)
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, "members/add/"), {"username": "gone", "role": "viewer"})
    assert response.status_code == 400 and "is inactive" in _body(response)


def test_change_role_audited(client, project_team, slug):
    editor = _membership(project_team, "editor")
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, f"members/{editor.pk}/role/"), {"role": "owner"}, follow=True)
    assert "editor is now owner (was editor)." in _messages(response)
    editor.refresh_from_db()
    assert editor.role == Role.OWNER
    event = AuditEvent.objects.filter(action="membership.set_role", target_id=str(editor.pk)).latest("id")
    assert event.data == {"user": "editor", "from": "editor", "to": "owner"}
    # the same role again changes nothing and writes no audit event
    before = AuditEvent.objects.count()
    response = client.post(_url(slug, f"members/{editor.pk}/role/"), {"role": "owner"}, follow=True)
    assert "editor is already owner; nothing changed." in _messages(response)
    assert AuditEvent.objects.count() == before


def test_a_bad_role_is_an_error_in_its_row(client, project_team, slug):
    viewer = _membership(project_team, "viewer")
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, f"members/{viewer.pk}/role/"), {"role": "god"})
    assert response.status_code == 400
    assert f'<p class="field-error" id="role-error-{viewer.pk}">Choose one of the roles' in _body(response)
    viewer.refresh_from_db()
    assert viewer.role == Role.VIEWER


def test_the_last_owner_can_neither_be_demoted_nor_removed(client, project_team, slug):
    owner = _membership(project_team, "owner")
    client.force_login(project_team["owner"])
    before = AuditEvent.objects.count()
    response = client.post(_url(slug, f"members/{owner.pk}/role/"), {"role": "editor"})
    assert response.status_code == 400
    body = _body(response)
    assert (f'<p class="field-error" id="role-error-{owner.pk}">owner is the only owner: make someone else owner '
            "first.</p>") in body
    assert re.search(rf'<select id="role-{owner.pk}"[^>]*>.*?<option value="editor" selected>', body, re.S)
    response = client.post(_url(slug, f"members/{owner.pk}/remove/"))
    assert response.status_code == 400
    assert "owner is the only owner and cannot be removed: make someone else owner first." in _body(response)
    owner.refresh_from_db()
    assert owner.role == Role.OWNER and AuditEvent.objects.count() == before
    # the page marks the only owner and disables its remove button
    body = _body(client.get(_url(slug)))
    assert "only owner</span>" in body and "disabled title=\"The only owner cannot be removed" in body

    # with a second owner, the first may step down
    membership_set_role(project=project_team["project"], user=project_team["editor"], role=Role.OWNER,
                        actor=project_team["owner"])
    response = client.post(_url(slug, f"members/{owner.pk}/role/"), {"role": "editor"}, follow=True)
    assert "You are no longer an owner: the page is read-only for you now." in _messages(response)
    assert 'id="price-input"' not in _body(response)
    editor = _membership(project_team, "editor")
    client.force_login(project_team["editor"])
    assert client.post(_url(slug, f"members/{editor.pk}/remove/")).status_code == 400  # the only owner again


def test_remove_a_member_audited_and_leave(client, project_team, slug):
    viewer = _membership(project_team, "viewer")
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, f"members/{viewer.pk}/remove/"), follow=True)
    assert "viewer was removed from Acme agents." in _messages(response)
    assert not Membership.objects.filter(pk=viewer.pk).exists()
    event = AuditEvent.objects.get(action="membership.remove")
    assert event.target_id == str(viewer.pk) and event.data == {"user": "viewer", "from": "viewer"}
    client.force_login(project_team["viewer"])
    assert client.get(_url(slug)).status_code == 404  # no longer a member
    # an owner who is not the last one may leave
    membership_set_role(project=project_team["project"], user=project_team["editor"], role=Role.OWNER,
                        actor=project_team["owner"])
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, f"members/{_membership(project_team, 'owner').pk}/remove/"))
    assert response.status_code == 302 and response.url == "/"


def test_a_member_of_another_project_is_404(client, project_team, slug):
    other = Membership.objects.get(project=project_team["other"])
    client.force_login(project_team["owner"])
    assert client.post(_url(slug, f"members/{other.pk}/role/"), {"role": "viewer"}).status_code == 404
    assert client.post(_url(slug, f"members/{other.pk}/remove/")).status_code == 404
    assert Membership.objects.filter(pk=other.pk, role=Role.OWNER).exists()


def test_member_names_are_escaped(client, project_team, slug, make_user):
    hostile = make_user("<b>x</b>")
    membership_set_role(project=project_team["project"], user=hostile, role=Role.VIEWER, actor=project_team["owner"])
    client.force_login(project_team["owner"])
    body = _body(client.get(_url(slug)))
    assert "<b>x</b>" not in body and "&lt;b&gt;x&lt;/b&gt;" in body


# ---------------------------------------------------------------------------------------
# Price per device-hour
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("typed", "stored", "shown"), [
    ("2.5", Decimal("2.5"), "2.5"), (" 0 ", Decimal("0"), "0"), ("100", Decimal("100"), "100"),
    (".75", Decimal("0.75"), "0.75"), ("999999.9999", Decimal("999999.9999"), "999999.9999"),
    ("1.50000", Decimal("1.5"), "1.5"),
])
def test_price_is_saved_audited_and_shown(client, project_team, slug, typed, stored, shown):
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, "price/"), {"price": typed}, follow=True)
    assert response.redirect_chain[-1][0].endswith("/settings/#price")
    assert f"The price per device-hour is now {shown}." in _messages(response)
    assert Project.objects.get(pk=project_team["project"].pk).price_per_device_hour == stored
    assert f'id="price-input" name="price" value="{shown}"' in _body(response)
    assert AuditEvent.objects.filter(action="project.set_price").latest("id").data["to"] is not None
    client.force_login(project_team["viewer"])
    assert f"<strong>{shown}</strong> per device-hour" in _body(client.get(_url(slug)))


def test_empty_price_clears_it(client, project_team, slug):
    Project.objects.filter(pk=project_team["project"].pk).update(price_per_device_hour=Decimal("3"))
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, "price/"), {"price": "  "}, follow=True)
    assert "The price per device-hour is cleared: cost estimates are not shown." in _messages(response)
    assert Project.objects.get(pk=project_team["project"].pk).price_per_device_hour is None
    assert AuditEvent.objects.get(action="project.set_price").data == {"from": "3.0000", "to": None}
    client.force_login(project_team["viewer"])
    assert "Not set: runs show no cost estimate." in _body(client.get(_url(slug)))


@pytest.mark.parametrize(("typed", "message"), [
    ("-1", "cannot be negative"),
    ("abc", "Enter a plain number"),
    ("$2.50", "without a currency sign"),
    ("1,000", "Use a point for decimals (1.000) and no thousands separators (1000)."),
    ("1 000", "Enter a plain number"),
    ("1e3", "Enter a plain number"),
    ("NaN", "Enter a plain number"),
    ("\u0661\u0662", "Enter a plain number"),  # Arabic-Indic digits: Decimal would take them
    ("Infinity", "Enter a plain number"),
    ("1000000", "at most 999999.9999"),
    ("0.00001", "at most 4 decimal places"),
    ("1\x002", "NUL character"),
    ("1" * 33, "at most 32 are allowed"),
])
def test_price_errors_beside_the_field_keeping_what_was_typed(client, project_team, slug, typed, message):
    Project.objects.filter(pk=project_team["project"].pk).update(price_per_device_hour=Decimal("4"))
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, "price/"), {"price": typed})
    assert response.status_code == 400
    body = _body(response)
    error = re.search(r'<p class="field-error" id="price-error">([^<]*)</p>', body)
    assert error and message in error.group(1), (typed, error and error.group(1))
    if "\x00" not in typed:
        assert f'name="price" value="{typed}"' in body.replace("&#x27;", "'").replace("&quot;", '"')
    assert Project.objects.get(pk=project_team["project"].pk).price_per_device_hour == Decimal("4")
    assert not AuditEvent.objects.filter(action="project.set_price").exists()


def test_service_refuses_out_of_bounds_prices(project_team):
    from webapp.projects.services.projects import project_price_set

    for bad in (Decimal("-0.01"), Decimal("1000000"), Decimal("1.00001"), Decimal("NaN"), Decimal("Infinity")):
        with pytest.raises(ValueError):
            project_price_set(project=project_team["project"], price=bad, actor=project_team["owner"])


# ---------------------------------------------------------------------------------------
# API tokens
# ---------------------------------------------------------------------------------------


def _secret(body: str) -> str:
    match = re.search(r'<code id="new-token-secret" class="secret">(cru_[A-Za-z0-9_-]+)</code>', body)
    assert match, "no secret on the page"
    return match.group(1)


def test_token_is_shown_once_authenticates_and_revoking_it_gives_401(project_team, slug):
    browser = Client()
    browser.force_login(project_team["editor"])
    response = browser.post(_url(slug, "tokens/"), {"name": "  ci <runner>  "})
    assert response.status_code == 302  # a reload of the page that follows issues nothing
    assert "no-store" in response["Cache-Control"]
    response = browser.get(response["Location"])
    assert "no-store" in response["Cache-Control"]
    body = _body(response)
    secret = _secret(body)
    assert body.count(secret) == 1  # exactly once on the page
    assert "API token “ci &lt;runner&gt;” created" in body
    token = ApiToken.objects.get(user=project_team["editor"])
    assert token.name == "ci <runner>" and secret.startswith(token.prefix) and token.token_hash != secret
    assert secret not in str(dict(browser.session))  # gone from the session once shown
    assert _messages(response) == []

    # the next page load does not show it again (not in the session, not in a message)
    again = _body(browser.get(_url(slug)))
    assert secret not in again and "new-token-secret" not in again
    assert f"<code>{token.prefix}…</code>" in again and "never" in again

    script = Client()
    api = script.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api.status_code == 200
    assert [p["slug"] for p in api.json()] == [slug]
    token.refresh_from_db()
    assert token.last_used_at is not None

    response = browser.post(_url(slug, f"tokens/{token.pk}/revoke/"), follow=True)
    assert any("is revoked: it no longer authenticates." in m for m in _messages(response))
    assert script.get("/api/projects", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401
    body = _body(response)
    assert '<span class="state revoked">revoked</span>' in body
    assert f"/tokens/{token.pk}/revoke/" not in body  # no second revoke button
    response = browser.post(_url(slug, f"tokens/{token.pk}/revoke/"), follow=True)
    assert any("was already revoked" in m for m in _messages(response))


def test_tokens_listed_are_only_your_own(client, project_team, slug):
    theirs = api_token_issue(user=project_team["owner"], name="owner's deploy key").token
    mine = api_token_issue(user=project_team["viewer"], name="viewer laptop").token
    client.force_login(project_team["viewer"])
    body = _body(client.get(_url(slug)))
    assert "viewer laptop" in body and "owner&#x27;s deploy key" not in body and theirs.prefix not in body
    assert "Tokens belong to you, not to this project" in body
    # someone else's token cannot be revoked through this page, even by an owner
    client.force_login(project_team["owner"])
    assert client.post(_url(slug, f"tokens/{mine.pk}/revoke/")).status_code == 404
    mine.refresh_from_db()
    assert mine.revoked_at is None


def test_active_tokens_are_listed_before_revoked_ones(client, project_team, slug):
    from webapp.projects.services.projects import api_token_revoke

    user = project_team["reviewer"]
    old = api_token_issue(user=user, name="old").token
    api_token_issue(user=user, name="revoked-one")
    api_token_revoke(token=ApiToken.objects.get(name="revoked-one"))
    api_token_issue(user=user, name="new")
    client.force_login(user)
    body = _body(client.get(_url(slug)))
    names = re.findall(r'<td class="token-name">([^<]*)</td>', body)
    assert names == ["new", "old", "revoked-one"]
    assert old.prefix in body


@pytest.mark.parametrize(("typed", "message"), [
    ("", "Give the token a name"),
    ("   ", "Give the token a name"),
    ("a\x00b", "NUL character"),
    ("n" * 101, "at most 100 are allowed"),
])
def test_token_name_errors_beside_the_field(client, project_team, slug, typed, message):
    client.force_login(project_team["viewer"])
    response = client.post(_url(slug, "tokens/"), {"name": typed})
    assert response.status_code == 400
    body = _body(response)
    error = re.search(r'<p class="field-error" id="token-name-error">([^<]*)</p>', body)
    assert error and message in error.group(1)
    if "\x00" not in typed:
        assert f'name="name" value="{typed}"' in body
    assert "new-token-secret" not in body
    assert not ApiToken.objects.exists()


# ---------------------------------------------------------------------------------------
# Two owners stepping down at once (PostgreSQL: SQLite serialises every write)
# ---------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("second", ["demote", "remove"])
def test_two_owners_stepping_down_at_once_leave_one_owner(project_team, second):
    import threading

    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the race needs concurrent writers (PostgreSQL); SQLite serialises every write")
    project, slug = project_team["project"], project_team["project"].slug
    membership_set_role(project=project, user=project_team["editor"], role=Role.OWNER, actor=project_team["owner"])
    ids = {who: _membership(project_team, who).pk for who in ("owner", "editor")}
    # each owner demotes (or removes) the other, both released together
    plans = [("owner", "editor", "demote"), ("editor", "owner", second)]
    barrier = threading.Barrier(len(plans))
    codes: list[int | None] = [None] * len(plans)

    def act(i: int) -> None:
        from django.db import connection as thread_connection

        actor, target, how = plans[i]
        try:
            client = Client()
            client.force_login(project_team[actor])
            tail = f"members/{ids[target]}/role/" if how == "demote" else f"members/{ids[target]}/remove/"
            barrier.wait()
            codes[i] = client.post(_url(slug, tail), {"role": "viewer"}).status_code
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=act, args=(i,)) for i in range(len(plans))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The loser is refused: 403 once demoted (no longer an owner), 404 once removed (no longer a
    # member, and a project is hidden from those who are not), 400 if it lost at the last-owner check.
    refusals = {400, 403} | ({404} if second == "remove" else set())
    assert codes.count(302) == 1 and set(codes) - {302} <= refusals, codes
    assert Membership.objects.filter(project=project, role=Role.OWNER).count() == 1

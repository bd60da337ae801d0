"""Synthetic workplace tasks: templates over the seed data, each checked in the sandbox.

In the spirit of NeMo Data Designer: every task comes from a template whose slots are
filled from the state with controlled relationships (the person named exists in the
directory and has a unique first name, the email or meeting referred to exists and is the
only one matching the description, new meetings fall inside 9:00-18:00 on a working day
after today). Each task's ground truth (its write calls, as in NeMo Gym) is executed in a
fresh sandbox and must change exactly the rows the template says it changes, or the task
is rejected. Exact and near duplicates (same text once lower-cased, stripped of
punctuation and politeness words) are dropped.

Splits are decided by a stable hash of the task id (hashlib, never hash()): about
85% train, 8% validation, 7% held_out, and every task of a HELD_OUT_TEMPLATES template is
held out, so held-out results measure generalisation to unseen request shapes. Those come in
two kinds, measured apart: REWORDED_TEMPLATES ask for trained actions in new wording, and
NOVEL_PAIR_TEMPLATES ask to write a field that no training task writes.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from environments.types import Task
from environments.workplace.compare import changes
from environments.workplace.sandbox import (
    BOARDS,
    CRM,
    EMAILS,
    EVENTS,
    LISTS,
    PLOT_TYPES,
    PRODUCTS,
    STATUSES,
    TASKS,
    Sandbox,
)
from environments.workplace.state import PLOTS, BaseState, Row
from environments.workplace.tools import TOOL_SPECS, toolkit_of, tools_for

CATEGORIES = ("email", "calendar", "analytics", "project_management",
              "customer_relationship_manager")
# Always held out. Novel pairs ask for a (tool, field) pair no training task writes;
# REWORDED_TEMPLATES (below) ask for trained pairs in request shapes no training template uses.
NOVEL_PAIR_TEMPLATES = frozenset({
    "calendar_change_duration", "analytics_two_plots", "pm_change_due_date",
    "crm_stale_proposals_to_lost",
})
_SPLIT_BUCKETS = (("train", 85), ("validation", 93), ("held_out", 100))
_FILLER = re.compile(r"\b(please|kindly|can you|could you|would you|for me|thanks|thank you)\b")
_NON_WORD = re.compile(r"[^a-z0-9@.\s]+")

Call = tuple[str, dict[str, Any]]

SUBJECTS = (
    "Quarterly planning", "Design review follow-up", "Budget approval", "Launch checklist",
    "Customer feedback summary", "Hiring update", "Offsite logistics", "Security review",
    "Roadmap questions", "Sprint demo", "Vendor contract", "Team lunch on Friday",
    "Onboarding plan", "Metrics dashboard", "Release notes draft", "Incident follow-up",
    "Training schedule", "Pricing proposal", "Partner meeting notes", "Weekly status",
)
BODIES = (
    "Can we meet tomorrow to go over this?", "Please send me your comments by Friday.",
    "Thanks for pushing this forward, great work.", "I have shared the document with you.",
    "Let me know if anything is blocking you.", "The deadline moved to next week.",
    "Could you take the lead on this one?", "I will be out of office on Monday.",
    "Here are the numbers you asked for.", "Let's discuss this in our next one-on-one.",
    "Please review the attached proposal.", "Looking forward to your update.",
)
REPLIES = (
    "Thanks, I will review it today.", "Got it - let's discuss tomorrow.",
    "Thanks for the update - I will get back to you tomorrow.", "Sounds good to me.",
    "Approved, please go ahead.", "Can you send more details?", "Great work, thank you!",
)
MEETING_NAMES = (
    "Project Sync", "Roadmap Review", "Budget Check-in", "Hiring Debrief", "Design Critique",
    "Customer Escalation Review", "Launch Go/No-Go", "Quarterly Goals", "Coffee Chat",
    "Tech Debt Triage", "Campaign Planning", "Data Review",
)
NEW_TASKS = (
    "Fix login redirect bug", "Add CSV export to reports", "Design onboarding checklist",
    "Upgrade payment SDK", "Write API rate limit docs", "Audit color contrast",
    "Add retry to webhook sender", "Create pricing page variants", "Profile slow dashboard queries",
    "Add SSO configuration screen", "Clean up feature flags", "Sketch mobile settings layout",
)
NEW_CUSTOMERS = (
    "Alex Rivers", "Jordan Pike", "Casey Marlow", "Drew Hastings", "Robin Calloway",
    "Sam Whitlock", "Charlie Fenwick", "Frankie Ashdown", "Jessie Langford", "Kai Brennan",
    "Lee Stanton", "Micah Ellery", "Noel Bramwell", "Peyton Sayer", "Sasha Kingsley",
)
NOTES = (
    "Prefers email over phone calls", "Asked for a revised quote", "Budget approved for next quarter",
    "Wants a demo with their IT team", "Waiting on legal review", "Interested in a multi-year deal",
    "Requested case studies", "Decision maker is the CFO",
)
EMAIL_DOMAINS = ("northwind.io", "bluepeak.com", "lumenworks.co", "harborline.net")
VALUE_WORDS = {
    "total_visits": "total visits", "session_duration_seconds": "session duration",
    "user_engaged": "engaged users", "visits_direct": "direct visits",
    "visits_referral": "referral visits", "visits_search_engine": "search engine visits",
    "visits_social_media": "social media visits",
}


@dataclass
class Effect:
    """One change a ground truth must make: update / delete a row, or create one."""

    table: str
    kind: str  # "update" | "delete" | "create"
    row_id: str | None = None
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class Draft:
    template: str
    category: str
    request: str
    writes: list[Call]
    reads: list[Call]
    effects: list[Effect]


@dataclass
class World:
    """Indices over a base state that templates draw their slots from."""

    base: BaseState
    people: dict[str, str]  # unique first name (capitalised) -> address
    now: datetime
    emails: list[Row]
    events: list[Row]
    tasks: list[Row]
    customers: list[Row]
    assignees: list[str]
    visit_days: list[str]

    @classmethod
    def of(cls, base: BaseState) -> World:
        firsts: dict[str, list[str]] = {}
        for address in base.directory:
            firsts.setdefault(address.split("@")[0].split(".")[0].capitalize(), []).append(address)
        people = {name: addrs[0] for name, addrs in sorted(firsts.items()) if len(addrs) == 1}
        tasks = list(base.tables[TASKS].values())
        return cls(
            base=base,
            people=people,
            now=datetime.fromisoformat(base.now),
            emails=list(base.tables[EMAILS].values()),
            events=list(base.tables[EVENTS].values()),
            tasks=tasks,
            customers=list(base.tables[CRM].values()),
            assignees=sorted({t["assigned_to_email"] for t in tasks if t["assigned_to_email"]}),
            visit_days=sorted({r["date_of_visit"] for r in base.analytics}),
        )

    def first_name(self, address: str) -> str | None:
        first = address.split("@")[0].split(".")[0].capitalize()
        return first if self.people.get(first) == address else None


def _lookup(first: str) -> Call:
    return ("company_directory_find_email_address", {"name": first})


def _spoken_date(day: date) -> str:
    return f"{day:%A}, {day:%B} {day.day}"


def _spoken_time(minutes: int) -> str:
    hour, minute = divmod(minutes, 60)
    suffix = "am" if hour < 12 else "pm"
    hour12 = hour if hour <= 12 else hour - 12
    return f"{hour12}{suffix}" if minute == 0 else f"{hour12}:{minute:02d}{suffix}"


def _future_workday(rng: random.Random, world: World, within_days: int = 28) -> date:
    while True:
        day = world.now.date() + timedelta(days=rng.randint(1, within_days))
        if day.weekday() < 5:
            return day


def _unique(rows: list[Row], predicate: Callable[[Row], bool]) -> list[Row]:
    return [row for row in rows if predicate(row)]


# ---------------------------------------------------------------------------- email


def email_send_lookup(rng: random.Random, w: World) -> Draft | None:
    return _email_send(rng, w, "email_send_lookup", (
        "Send an email to {f} with the subject '{s}' saying '{b}'",
        "Email {f} about '{s}': '{b}'",
        "Can you write to {f}? Subject: '{s}'. Message: '{b}'",
        "Please send {f} an email titled '{s}' that says '{b}'",
        "Write an email to {f}. Subject '{s}', body '{b}'",
        "Shoot {f} an email ('{s}') with the text '{b}'",
        "{f} needs an email from me: subject '{s}', text '{b}'",
    ))


def _email_send(rng: random.Random, w: World, template: str, phrasings: tuple[str, ...]) -> Draft | None:
    """A new email to a colleague named by first name ({f}), with subject {s} and body {b}."""
    first = rng.choice(sorted(w.people))
    subject, body = rng.choice(SUBJECTS), rng.choice(BODIES)
    request = rng.choice(phrasings).format(f=first, s=subject, b=body)
    send = ("email_send_email", {"recipient": w.people[first], "subject": subject, "body": body})
    return Draft(template, "email", request, [send], [_lookup(first)],
                 [Effect(EMAILS, "create", values={"sender/recipient": w.people[first], "subject": subject})])


def _latest(rows: list[Row]) -> Row | None:
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r["sent_datetime"])
    if len(rows) > 1 and rows[-1]["sent_datetime"] == rows[-2]["sent_datetime"]:
        return None
    return rows[-1]


def email_reply_latest(rng: random.Random, w: World) -> Draft | None:
    email = rng.choice(w.emails)
    first = w.first_name(email["sender/recipient"])
    if first is None or email["inbox/outbox"] != "inbox":
        return None
    same = _unique(w.emails, lambda r: r["sender/recipient"] == email["sender/recipient"]
                   and r["subject"] == email["subject"] and r["inbox/outbox"] == "inbox")
    if _latest(same) is not email:
        return None
    reply = rng.choice(REPLIES)
    request = rng.choice((
        "Reply to {f}'s last email about '{s}' with '{r}'",
        "Respond to the latest email from {f} titled '{s}': '{r}'",
        "Answer {f}'s most recent '{s}' email with '{r}'",
    )).format(f=first, s=email["subject"], r=reply)
    search = ("email_search_emails", {"query": f"{first.lower()} {email['subject']}"})
    call = ("email_reply_email", {"email_id": email["email_id"], "body": reply})
    return Draft("email_reply_latest", "email", request, [call], [search],
                 [Effect(EMAILS, "create", values={"subject": "RE: " + email["subject"]})])


def email_forward_subject(rng: random.Random, w: World) -> Draft | None:
    email = rng.choice(w.emails)
    sender = w.first_name(email["sender/recipient"])
    target = rng.choice(sorted(w.people))
    same = _unique(w.emails, lambda r: r["sender/recipient"] == email["sender/recipient"]
                   and r["subject"] == email["subject"])
    if sender is None or target == sender or _latest(same) is not email:
        return None
    request = rng.choice((
        "Forward the latest email from {a} about '{s}' to {b}",
        "Send {b} the most recent '{s}' email that {a} sent",
        "Please forward {a}'s last '{s}' email to {b}",
    )).format(a=sender, s=email["subject"], b=target)
    call = ("email_forward_email", {"email_id": email["email_id"], "recipient": w.people[target]})
    reads = [("email_search_emails", {"query": f"{sender.lower()} {email['subject']}"}), _lookup(target)]
    return Draft("email_forward_subject", "email", request, [call], reads,
                 [Effect(EMAILS, "create", values={"subject": "FW: " + email["subject"],
                                                   "sender/recipient": w.people[target]})])


def email_delete_latest_from(rng: random.Random, w: World) -> Draft | None:
    first = rng.choice(sorted(w.people))
    latest = _latest(_unique(w.emails, lambda r: r["sender/recipient"] == w.people[first]
                             and r["inbox/outbox"] == "inbox"))
    if latest is None:
        return None
    request = rng.choice((
        "Delete my last email from {f}", "Remove the most recent email {f} sent me",
        "Trash the latest email I got from {f}",
    )).format(f=first)
    call = ("email_delete_email", {"email_id": latest["email_id"]})
    return Draft("email_delete_latest_from", "email", request, [call],
                 [("email_search_emails", {"query": first.lower()})],
                 [Effect(EMAILS, "delete", latest["email_id"])])


def email_delete_subject_batch(rng: random.Random, w: World) -> Draft | None:
    email = rng.choice(w.emails)
    first = w.first_name(email["sender/recipient"])
    if first is None:
        return None
    matches = _unique(w.emails, lambda r: r["sender/recipient"] == email["sender/recipient"]
                      and r["subject"] == email["subject"])
    request = rng.choice((
        "Delete all emails from {f} with the subject '{s}'",
        "Get rid of every '{s}' email from {f}",
    )).format(f=first, s=email["subject"])
    calls = [("email_delete_email", {"email_id": r["email_id"]}) for r in matches]
    return Draft("email_delete_subject_batch", "email", request, calls,
                 [("email_search_emails", {"query": f"{first.lower()} {email['subject']}"})],
                 [Effect(EMAILS, "delete", r["email_id"]) for r in matches])


def email_send_to_customer(rng: random.Random, w: World) -> Draft | None:
    customer = rng.choice(w.customers)
    if not customer["customer_email"]:
        return None
    subject = rng.choice(("Thank you for your business", "Following up", "Next steps",
                          "Your proposal", "Checking in"))
    body = rng.choice(BODIES)
    request = rng.choice((
        "Email our customer {c} with the subject '{s}' and the message '{b}'",
        "Look up {c} in the CRM and send them an email titled '{s}': '{b}'",
    )).format(c=customer["customer_name"], s=subject, b=body)
    call = ("email_send_email", {"recipient": customer["customer_email"], "subject": subject, "body": body})
    reads = [("customer_relationship_manager_search_customers", {"customer_name": customer["customer_name"]})]
    return Draft("email_send_to_customer", "email", request, [call], reads,
                 [Effect(EMAILS, "create", values={"sender/recipient": customer["customer_email"]})])


# ---------------------------------------------------------------------------- calendar


def _event_day(event: Row) -> date:
    return datetime.fromisoformat(event["event_start"]).date()


def _single_event(rng: random.Random, w: World) -> tuple[Row, str] | None:
    """An event identified unambiguously by its name, participant and day."""
    event = rng.choice(w.events)
    first = w.first_name(event["participant_email"])
    if first is None:
        return None
    same = _unique(w.events, lambda r: r["event_name"] == event["event_name"]
                   and r["participant_email"] == event["participant_email"]
                   and _event_day(r) == _event_day(event))
    return (event, first) if len(same) == 1 else None


def calendar_create_lookup(rng: random.Random, w: World) -> Draft | None:
    first = rng.choice(sorted(w.people))
    duration = rng.choice((30, 45, 60, 90))
    start = 9 * 60 + 30 * rng.randrange((18 * 60 - duration - 9 * 60) // 30 + 1)
    day = _future_workday(rng, w)
    name = rng.choice(MEETING_NAMES)
    request = rng.choice((
        "Schedule a {d}-minute meeting called '{n}' with {f} on {day} at {t}",
        "Book '{n}' with {f} for {day} at {t}, {d} minutes",
        "Set up a {d} minute '{n}' with {f} at {t} on {day}",
    )).format(d=duration, n=name, f=first, day=_spoken_date(day), t=_spoken_time(start))
    when = datetime.combine(day, datetime.min.time()) + timedelta(minutes=start)
    call = ("calendar_create_event", {"event_name": name, "participant_email": w.people[first],
                                      "event_start": when.strftime("%Y-%m-%d %H:%M:%S"),
                                      "duration": str(duration)})
    return Draft("calendar_create_lookup", "calendar", request, [call], [_lookup(first)],
                 [Effect(EVENTS, "create", values={"event_name": name})])


def calendar_rename_last_on_day(rng: random.Random, w: World) -> Draft | None:
    day = _event_day(rng.choice(w.events))
    on_day = sorted(_unique(w.events, lambda r: _event_day(r) == day), key=lambda r: r["event_start"])
    if len(on_day) > 1 and on_day[-1]["event_start"] == on_day[-2]["event_start"]:
        return None
    last, new = on_day[-1], rng.choice(MEETING_NAMES)
    if last["event_name"] == new:
        return None
    request = rng.choice((
        "Change the name of the last event on {day} to '{n}'",
        "Rename my final meeting on {day} to '{n}'",
    )).format(day=f"{day:%B} {day.day}", n=new)
    call = ("calendar_update_event", {"event_id": last["event_id"], "field": "event_name", "new_value": new})
    reads = [("calendar_search_events", {"time_min": f"{day} 00:00:00", "time_max": f"{day} 23:59:59"})]
    return Draft("calendar_rename_last_on_day", "calendar", request, [call], reads,
                 [Effect(EVENTS, "update", last["event_id"], {"event_name": new})])


def calendar_reschedule(rng: random.Random, w: World) -> Draft | None:
    return _calendar_reschedule(rng, w, "calendar_reschedule", (
        "Move the '{n}' with {f} on {day} to {t}",
        "Reschedule my '{n}' meeting with {f} on {day} so it starts at {t}",
        "Change the start time of the '{n}' with {f} on {day} to {t}",
        "Can the '{n}' with {f} on {day} start at {t}? Update it",
        "{t} works better for the '{n}' with {f} on {day}; move it there",
    ))


def _calendar_reschedule(rng: random.Random, w: World, template: str, phrasings: tuple[str, ...]) -> Draft | None:
    """A new start time ({t}) for the meeting {n} with {f} on {day}, same day and length."""
    picked = _single_event(rng, w)
    if picked is None:
        return None
    event, first = picked
    duration = int(event["duration"])
    start = 9 * 60 + 30 * rng.randrange((18 * 60 - duration - 9 * 60) // 30 + 1)
    day = _event_day(event)
    when = (datetime.combine(day, datetime.min.time()) + timedelta(minutes=start)).strftime("%Y-%m-%d %H:%M:%S")
    if when == event["event_start"]:
        return None
    request = rng.choice(phrasings).format(
        n=event["event_name"], f=first, day=f"{day:%B} {day.day}", t=_spoken_time(start))
    call = ("calendar_update_event", {"event_id": event["event_id"], "field": "event_start", "new_value": when})
    reads = [("calendar_search_events", {"query": event["participant_email"]})]
    return Draft(template, "calendar", request, [call], reads,
                 [Effect(EVENTS, "update", event["event_id"], {"event_start": when})])


def calendar_cancel(rng: random.Random, w: World) -> Draft | None:
    return _calendar_cancel(rng, w, "calendar_cancel", (
        "Cancel the '{n}' with {f} on {day}", "Delete my '{n}' meeting with {f} on {day}",
        "Remove the '{n}' with {f} on {day} from the calendar",
        "The '{n}' with {f} on {day} is cancelled; delete it",
        "Scrap my '{n}' with {f} on {day}",
    ))


def _calendar_cancel(rng: random.Random, w: World, template: str, phrasings: tuple[str, ...]) -> Draft | None:
    """The meeting {n} with {f} on {day} deleted."""
    picked = _single_event(rng, w)
    if picked is None:
        return None
    event, first = picked
    day = _event_day(event)
    request = rng.choice(phrasings).format(n=event["event_name"], f=first, day=f"{day:%B} {day.day}")
    call = ("calendar_delete_event", {"event_id": event["event_id"]})
    return Draft(template, "calendar", request, [call],
                 [("calendar_search_events", {"query": event["participant_email"]})],
                 [Effect(EVENTS, "delete", event["event_id"])])


def calendar_change_duration(rng: random.Random, w: World) -> Draft | None:
    picked = _single_event(rng, w)
    if picked is None:
        return None
    event, first = picked
    start = datetime.fromisoformat(event["event_start"])
    room = 18 * 60 - (start.hour * 60 + start.minute)
    options = [m for m in (30, 45, 60, 90, 120) if m <= room and str(m) != event["duration"]]
    if not options:
        return None
    minutes = rng.choice(options)
    request = rng.choice((
        "Make the '{n}' with {f} on {day} {m} minutes long",
        "Change the length of my '{n}' meeting with {f} on {day} to {m} minutes",
    )).format(n=event["event_name"], f=first, day=f"{start:%B} {start.day}", m=minutes)
    call = ("calendar_update_event", {"event_id": event["event_id"], "field": "duration", "new_value": str(minutes)})
    return Draft("calendar_change_duration", "calendar", request, [call],
                 [("calendar_search_events", {"query": event["participant_email"]})],
                 [Effect(EVENTS, "update", event["event_id"], {"duration": str(minutes)})])


def calendar_change_participant(rng: random.Random, w: World) -> Draft | None:
    picked = _single_event(rng, w)
    if picked is None:
        return None
    event, first = picked
    other = rng.choice(sorted(w.people))
    if w.people[other] == event["participant_email"]:
        return None
    day = _event_day(event)
    request = rng.choice((
        "Invite {g} instead of {f} to the '{n}' on {day}",
        "Replace {f} with {g} in my '{n}' meeting on {day}",
        "{g} will attend the '{n}' on {day} in place of {f}; update the event",
    )).format(n=event["event_name"], f=first, g=other, day=f"{day:%B} {day.day}")
    call = ("calendar_update_event", {"event_id": event["event_id"], "field": "participant_email",
                                      "new_value": w.people[other]})
    return Draft("calendar_change_participant", "calendar", request, [call],
                 [("calendar_search_events", {"query": event["participant_email"]}), _lookup(other)],
                 [Effect(EVENTS, "update", event["event_id"], {"participant_email": w.people[other]})])


def calendar_cancel_day_with_person(rng: random.Random, w: World) -> Draft | None:
    event = rng.choice(w.events)
    first = w.first_name(event["participant_email"])
    if first is None:
        return None
    day = _event_day(event)
    matches = _unique(w.events, lambda r: r["participant_email"] == event["participant_email"]
                      and _event_day(r) == day)
    request = rng.choice((
        "Cancel all my meetings with {f} on {day}", "Clear every meeting I have with {f} on {day}",
    )).format(f=first, day=f"{day:%B} {day.day}")
    calls = [("calendar_delete_event", {"event_id": r["event_id"]}) for r in matches]
    return Draft("calendar_cancel_day_with_person", "calendar", request, calls,
                 [("calendar_search_events", {"query": event["participant_email"]})],
                 [Effect(EVENTS, "delete", r["event_id"]) for r in matches])


# ---------------------------------------------------------------------------- analytics


def _plot(low: str, high: str, value: str, kind: str) -> tuple[Call, Effect]:
    path = f"plots/{low}_{high}_{value}_{kind}.png"
    return (("analytics_create_plot", {"time_min": low, "time_max": high, "value_to_plot": value,
                                       "plot_type": kind}),
            Effect(PLOTS, "create", values={"path": path}))


def _day_range(rng: random.Random, w: World) -> tuple[str, str]:
    low, high = sorted(rng.sample(w.visit_days, 2))
    return low, high


def analytics_plot_range(rng: random.Random, w: World) -> Draft | None:
    return _plot_range(rng, w, "analytics_plot_range", (
        "Create a {k} chart of {v} from {a} to {b}", "Plot {v} between {a} and {b} as a {k} chart",
        "I need a {k} plot of {v} for {a} through {b}",
        "Make a {k} graph showing {v} from {a} to {b}",
        "Draw a {k} chart with {v} between {a} and {b}",
        "{v} from {a} to {b}, please, as a {k} chart",
    ))


def _plot_range(rng: random.Random, w: World, template: str, phrasings: tuple[str, ...]) -> Draft | None:
    """A {k} plot of the value {v} between two days with data, {a} and {b}."""
    low, high = _day_range(rng, w)
    value, kind = rng.choice(sorted(VALUE_WORDS)), rng.choice(PLOT_TYPES)
    request = rng.choice(phrasings).format(k=kind, v=VALUE_WORDS[value], a=low, b=high)
    call, effect = _plot(low, high, value, kind)
    return Draft(template, "analytics", request, [call], [], [effect])


def analytics_plot_since(rng: random.Random, w: World) -> Draft | None:
    low = rng.choice(w.visit_days[:-1])
    today = w.base.today()
    value, kind = rng.choice(sorted(VALUE_WORDS)), rng.choice(PLOT_TYPES)
    spoken = datetime.fromisoformat(low)
    request = rng.choice((
        "Make a {k} chart of {v} since {d}", "Plot {v} since {d} as a {k} graph",
    )).format(k=kind, v=VALUE_WORDS[value], d=f"{spoken:%B} {spoken.day}")
    call, effect = _plot(low, today, value, kind)
    return Draft("analytics_plot_since", "analytics", request, [call], [], [effect])


def analytics_query_then_plot(rng: random.Random, w: World) -> Draft | None:
    low, high = _day_range(rng, w)
    kind = rng.choice(PLOT_TYPES)
    request = rng.choice((
        "How many visits did we get from {a} to {b}? Also create a {k} chart of total visits for that period",
        "Tell me the total visits between {a} and {b} and plot them as a {k} chart",
    )).format(a=low, b=high, k=kind)
    call, effect = _plot(low, high, "total_visits", kind)
    reads = [("analytics_total_visits_count", {"time_min": low, "time_max": high})]
    return Draft("analytics_query_then_plot", "analytics", request, [call], reads, [effect])


def analytics_two_plots(rng: random.Random, w: World) -> Draft | None:
    low, high = _day_range(rng, w)
    first, second = rng.sample(sorted(VALUE_WORDS), 2)
    kind_a, kind_b = rng.choice(PLOT_TYPES), rng.choice(PLOT_TYPES)
    request = (f"Create a {kind_a} chart of {VALUE_WORDS[first]} and a {kind_b} chart of {VALUE_WORDS[second]}, both from {low} to {high}")
    call_a, effect_a = _plot(low, high, first, kind_a)
    call_b, effect_b = _plot(low, high, second, kind_b)
    return Draft("analytics_two_plots", "analytics", request, [call_a, call_b], [], [effect_a, effect_b])


# ---------------------------------------------------------------------------- project management


def _single_task(rng: random.Random, w: World) -> Row | None:
    task = rng.choice(w.tasks)
    same = _unique(w.tasks, lambda r: r["task_name"].lower() == task["task_name"].lower())
    return task if len(same) == 1 else None


def pm_create_lookup(rng: random.Random, w: World) -> Draft | None:
    assignee = rng.choice(w.assignees)
    first = w.first_name(assignee)
    if first is None:
        return None
    name, board, list_name = rng.choice(NEW_TASKS), rng.choice(BOARDS), rng.choice(LISTS[:3])
    due = _future_workday(rng, w, 35)
    request = rng.choice((
        "Create a task '{n}' on the {b} board in {l}, assigned to {f} and due {d}",
        "Add '{n}' to the {b} {l} list for {f}, due on {d}",
        "New {b} task: '{n}', put it in {l}, assign it to {f}, due {d}",
    )).format(n=name, b=board, l=list_name, f=first, d=_spoken_date(due))
    call = ("project_management_create_task", {"task_name": name, "assigned_to_email": assignee,
                                               "list_name": list_name, "due_date": due.isoformat(),
                                               "board": board})
    return Draft("pm_create_lookup", "project_management", request, [call], [_lookup(first)],
                 [Effect(TASKS, "create", values={"task_name": name})])


def _task_update(template: str, task: Row, column: str, value: str, request: str) -> Draft:
    call = ("project_management_update_task", {"task_id": task["task_id"], "field": column, "new_value": value})
    reads = [("project_management_search_tasks", {"task_name": task["task_name"]})]
    return Draft(template, "project_management", request, [call], reads,
                 [Effect(TASKS, "update", task["task_id"], {column: value})])


def pm_move_task(rng: random.Random, w: World) -> Draft | None:
    return _pm_move(rng, w, "pm_move_task", (
        "Move '{t}' to {l}", "Put the task '{t}' in {l}", "Please move task '{t}' into the {l} list",
        "Task '{t}' belongs in {l}; move it", "Change the list of '{t}' to {l}", "Drag '{t}' over to {l}"))


def _pm_move(rng: random.Random, w: World, template: str, phrasings: tuple[str, ...]) -> Draft | None:
    """The task {t} moved to another list, {l}."""
    task = _single_task(rng, w)
    if task is None:
        return None
    target = rng.choice([name for name in LISTS if name != task["list_name"]])
    request = rng.choice(phrasings).format(t=task["task_name"], l=target)
    return _task_update(template, task, "list_name", target, request)


def pm_reassign_task(rng: random.Random, w: World) -> Draft | None:
    return _pm_reassign(rng, w, "pm_reassign_task", (
        "Reassign '{t}' to {f}", "Give the task '{t}' to {f}", "{f} should own '{t}' from now on",
        "Assign '{t}' to {f} instead", "Hand the task '{t}' to {f}", "'{t}' is {f}'s job now; reassign it"))


def _pm_reassign(rng: random.Random, w: World, template: str, phrasings: tuple[str, ...]) -> Draft | None:
    """The task {t} assigned to another colleague, {f} (first name; the address is looked up)."""
    task = _single_task(rng, w)
    assignee = rng.choice(w.assignees)
    first = w.first_name(assignee)
    if task is None or first is None or assignee == task["assigned_to_email"]:
        return None
    request = rng.choice(phrasings).format(t=task["task_name"], f=first)
    draft = _task_update(template, task, "assigned_to_email", assignee, request)
    draft.reads.append(_lookup(first))
    return draft


def pm_rename_task(rng: random.Random, w: World) -> Draft | None:
    task = _single_task(rng, w)
    new = rng.choice(NEW_TASKS)
    if task is None or any(r["task_name"].lower() == new.lower() for r in w.tasks):
        return None
    request = rng.choice(("Rename the task '{t}' to '{n}'", "Change the name of task '{t}' to '{n}'",
                          "'{t}' should be called '{n}' from now on")).format(t=task["task_name"], n=new)
    return _task_update("pm_rename_task", task, "task_name", new, request)


def pm_move_board(rng: random.Random, w: World) -> Draft | None:
    task = _single_task(rng, w)
    if task is None:
        return None
    board = rng.choice([name for name in BOARDS if name != task["board"]])
    request = rng.choice(("Move '{t}' over to the {b} board", "The task '{t}' belongs on the {b} board",
                          "Transfer '{t}' to the {b} board")).format(t=task["task_name"], b=board)
    return _task_update("pm_move_board", task, "board", board, request)


def pm_change_due_date(rng: random.Random, w: World) -> Draft | None:
    task = _single_task(rng, w)
    if task is None:
        return None
    due = _future_workday(rng, w, 42)
    if due.isoformat() == task["due_date"]:
        return None
    request = rng.choice(("Change the due date of '{t}' to {d}", "Push '{t}' so it is due {d}")).format(
        t=task["task_name"], d=_spoken_date(due))
    return _task_update("pm_change_due_date", task, "due_date", due.isoformat(), request)


def pm_delete_task(rng: random.Random, w: World) -> Draft | None:
    task = _single_task(rng, w)
    if task is None:
        return None
    request = rng.choice(("Delete the task '{t}'", "Remove '{t}' from the board")).format(t=task["task_name"])
    call = ("project_management_delete_task", {"task_id": task["task_id"]})
    return Draft("pm_delete_task", "project_management", request, [call],
                 [("project_management_search_tasks", {"task_name": task["task_name"]})],
                 [Effect(TASKS, "delete", task["task_id"])])


def pm_batch_move(rng: random.Random, w: World) -> Draft | None:
    task = rng.choice(w.tasks)
    first = w.first_name(task["assigned_to_email"])
    if first is None:
        return None
    matches = _unique(w.tasks, lambda r: r["assigned_to_email"] == task["assigned_to_email"]
                      and r["list_name"] == task["list_name"] and r["board"] == task["board"])
    target = rng.choice([name for name in LISTS if name != task["list_name"]])
    request = rng.choice((
        "Move all of {f}'s {l} tasks on the {b} board to {t}",
        "Everything {f} has in {l} on the {b} board should go to {t}",
    )).format(f=first, l=task["list_name"], b=task["board"], t=target)
    calls = [("project_management_update_task", {"task_id": r["task_id"], "field": "list_name",
                                                 "new_value": target}) for r in matches]
    reads = [_lookup(first), ("project_management_search_tasks", {
        "assigned_to_email": task["assigned_to_email"], "list_name": task["list_name"], "board": task["board"]})]
    return Draft("pm_batch_move", "project_management", request, calls, reads,
                 [Effect(TASKS, "update", r["task_id"], {"list_name": target}) for r in matches])


# ---------------------------------------------------------------------------- CRM


def _single_customer(rng: random.Random, w: World) -> Row | None:
    customer = rng.choice(w.customers)
    same = _unique(w.customers, lambda r: customer["customer_name"].lower() in r["customer_name"].lower())
    return customer if len(same) == 1 else None


def crm_add_lookup(rng: random.Random, w: World) -> Draft | None:
    reps = sorted({c["assigned_to_email"] for c in w.customers})
    rep = rng.choice(reps)
    first = w.first_name(rep)
    name = rng.choice(NEW_CUSTOMERS)
    if first is None or any(c["customer_name"] == name for c in w.customers):
        return None
    status, product = rng.choice(("Lead", "Qualified", "Proposal")), rng.choice(PRODUCTS)
    request = rng.choice((
        "Add {c} as a new {s} in the CRM, interested in {p}, and assign them to {f}",
        "Create a CRM record for {c}: status {s}, product interest {p}, owner {f}",
    )).format(c=name, s=status.lower(), p=product, f=first)
    call = ("customer_relationship_manager_add_customer", {
        "customer_name": name, "assigned_to_email": rep, "status": status, "product_interest": product})
    return Draft("crm_add_lookup", "customer_relationship_manager", request, [call], [_lookup(first)],
                 [Effect(CRM, "create", values={"customer_name": name, "status": status})])


def _customer_update(template: str, customer: Row, column: str, value: str, request: str) -> Draft:
    call = ("customer_relationship_manager_update_customer",
            {"customer_id": customer["customer_id"], "field": column, "new_value": value})
    reads = [("customer_relationship_manager_search_customers", {"customer_name": customer["customer_name"]})]
    return Draft(template, "customer_relationship_manager", request, [call], reads,
                 [Effect(CRM, "update", customer["customer_id"], {column: value})])


def crm_update_status(rng: random.Random, w: World) -> Draft | None:
    return _crm_status(rng, w, "crm_update_status", (
        "Mark {c} as {s} in the CRM", "Update {c}'s status to {s}", "{c} is now {s}; update the CRM",
        "Set the status of {c} to {s}", "Change {c} to {s} in the CRM", "{c} should be listed as {s}"))


def _crm_status(rng: random.Random, w: World, template: str, phrasings: tuple[str, ...]) -> Draft | None:
    """The customer {c} given another status, {s}."""
    customer = _single_customer(rng, w)
    if customer is None:
        return None
    status = rng.choice([s for s in STATUSES if s != customer["status"]])
    request = rng.choice(phrasings).format(c=customer["customer_name"], s=status)
    return _customer_update(template, customer, "status", status, request)


def crm_set_follow_up(rng: random.Random, w: World) -> Draft | None:
    customer = _single_customer(rng, w)
    if customer is None:
        return None
    day = _future_workday(rng, w, 30)
    request = rng.choice(("Set the follow-up date for {c} to {d}", "I need to follow up with {c} by {d}; update the CRM")).format(
        c=customer["customer_name"], d=_spoken_date(day))
    return _customer_update("crm_set_follow_up", customer, "follow_up_by", day.isoformat(), request)



def _customer_field_update(
    rng: random.Random, w: World, template: str, column: str,
    choose: Callable[[Row], str | None], phrasings: tuple[str, ...],
) -> Draft | None:
    """One field of one unambiguous customer set to choose(customer); None skips the draft.

    Phrasings are formatted with {c} (the customer's name) and {v} (the new value).
    """
    customer = _single_customer(rng, w)
    if customer is None:
        return None
    value = choose(customer)
    if value is None or value == customer[column]:
        return None
    request = rng.choice(phrasings).format(c=customer["customer_name"], v=value)
    return _customer_update(template, customer, column, value, request)


def crm_update_phone(rng: random.Random, w: World) -> Draft | None:
    return _crm_phone(rng, w, "crm_update_phone", (
        "Update {c}'s phone number to {v}", "{c} has a new phone number: {v}. Save it in the CRM",
        "Set the phone for {c} to {v}", "Change the phone number for {c} to {v}",
        "New number for {c}: {v}", "{c}'s phone is {v} now; update the record"))


def _crm_phone(rng: random.Random, w: World, template: str, phrasings: tuple[str, ...]) -> Draft | None:
    """A new phone number ({v}) for the customer {c}."""
    return _customer_field_update(rng, w, template, "customer_phone", lambda _: _new_phone(rng), phrasings)


def _new_phone(rng: random.Random) -> str:
    return f"{rng.randint(200, 989)}-{rng.randint(200, 999)}-{rng.randint(1000, 9999)}"


def _new_address(rng: random.Random, customer: Row) -> str:
    first, *rest = customer["customer_name"].lower().split()
    return f"{first}.{rest[-1] if rest else 'contact'}@{rng.choice(EMAIL_DOMAINS)}"


def crm_update_email(rng: random.Random, w: World) -> Draft | None:
    return _customer_field_update(
        rng, w, "crm_update_email", "customer_email", lambda c: _new_address(rng, c),
        ("Change {c}'s email address to {v}", "{c} now uses {v}; update the CRM", "Set the email for {c} to {v}"))


def crm_add_note(rng: random.Random, w: World) -> Draft | None:
    customer = _single_customer(rng, w)
    note = rng.choice(NOTES)
    if customer is None or customer["notes"] == note:
        return None
    request = rng.choice(("Set the notes for {c} to '{n}'", "Add this note to {c}'s CRM record: '{n}'",
                          "Note on {c} in the CRM: '{n}'")).format(c=customer["customer_name"], n=note)
    return _customer_update("crm_add_note", customer, "notes", note, request)


def crm_change_product(rng: random.Random, w: World) -> Draft | None:
    return _customer_field_update(
        rng, w, "crm_change_product", "product_interest",
        lambda c: rng.choice([p for p in PRODUCTS if p != c["product_interest"]]),
        ("{c} is now interested in {v}; update the CRM", "Change the product interest of {c} to {v}"))


def crm_reassign_customer(rng: random.Random, w: World) -> Draft | None:
    customer = _single_customer(rng, w)
    reps = sorted({c["assigned_to_email"] for c in w.customers})
    rep = rng.choice(reps)
    first = w.first_name(rep)
    if customer is None or first is None or rep == customer["assigned_to_email"]:
        return None
    request = rng.choice(("Assign {c} to {f} in the CRM", "{f} owns the {c} account now; update the CRM",
                          "Hand {c} over to {f}")).format(c=customer["customer_name"], f=first)
    draft = _customer_update("crm_reassign_customer", customer, "assigned_to_email", rep, request)
    draft.reads.append(_lookup(first))
    return draft


def crm_log_contact(rng: random.Random, w: World) -> Draft | None:
    customer = _single_customer(rng, w)
    if customer is None:
        return None
    day = w.now.date() - timedelta(days=rng.randint(0, 10))
    if day.weekday() >= 5:
        return None
    request = rng.choice(("We last spoke with {c} on {d}; update the CRM",
                          "Set the last contact date for {c} to {d}")).format(
        c=customer["customer_name"], d=_spoken_date(day))
    return _customer_update("crm_log_contact", customer, "last_contact_date", day.isoformat(), request)


def crm_delete_customer(rng: random.Random, w: World) -> Draft | None:
    customer = _single_customer(rng, w)
    if customer is None:
        return None
    request = rng.choice(("Delete {c} from the CRM", "Remove the customer {c} from the CRM")).format(
        c=customer["customer_name"])
    call = ("customer_relationship_manager_delete_customer", {"customer_id": customer["customer_id"]})
    return Draft("crm_delete_customer", "customer_relationship_manager", request, [call],
                 [("customer_relationship_manager_search_customers", {"customer_name": customer["customer_name"]})],
                 [Effect(CRM, "delete", customer["customer_id"])])


def crm_reassign_batch(rng: random.Random, w: World) -> Draft | None:
    reps = sorted({c["assigned_to_email"] for c in w.customers})
    old, new = rng.sample(reps, 2)
    old_first, new_first = w.first_name(old), w.first_name(new)
    product = rng.choice(PRODUCTS)
    matches = _unique(w.customers, lambda r: r["assigned_to_email"] == old and r["product_interest"] == product)
    if old_first is None or new_first is None or not matches:
        return None
    request = rng.choice((
        "{n} is taking over all of {o}'s customers interested in {p}. Reassign them in the CRM.",
        "Move every {p} account owned by {o} over to {n} in the CRM",
    )).format(n=new_first, o=old_first, p=product.lower())
    calls = [("customer_relationship_manager_update_customer", {
        "customer_id": r["customer_id"], "field": "assigned_to_email", "new_value": new}) for r in matches]
    reads = [_lookup(old_first), _lookup(new_first), ("customer_relationship_manager_search_customers",
                                                      {"assigned_to_email": old, "product_interest": product})]
    return Draft("crm_reassign_batch", "customer_relationship_manager", request, calls, reads,
                 [Effect(CRM, "update", r["customer_id"], {"assigned_to_email": new}) for r in matches])


def crm_stale_proposals_to_lost(rng: random.Random, w: World) -> Draft | None:
    product, weeks = rng.choice(PRODUCTS), rng.randint(2, 8)
    cutoff = (w.now.date() - timedelta(weeks=weeks)).isoformat()
    matches = _unique(w.customers, lambda r: r["status"] == "Proposal" and r["product_interest"] == product
                      and (r["last_contact_date"] or "9999") <= cutoff)
    if not matches:
        return None
    request = rng.choice((
        "Move all customers with a {p} proposal that we haven't contacted in {n} weeks to Lost",
        "Any {p} proposal with no contact for {n} weeks is lost; update the CRM",
    )).format(p=product.lower(), n=weeks)
    calls = [("customer_relationship_manager_update_customer", {
        "customer_id": r["customer_id"], "field": "status", "new_value": "Lost"}) for r in matches]
    reads = [("customer_relationship_manager_search_customers", {
        "status": "Proposal", "product_interest": product, "last_contact_date_max": cutoff})]
    return Draft("crm_stale_proposals_to_lost", "customer_relationship_manager", request, calls, reads,
                 [Effect(CRM, "update", r["customer_id"], {"status": "Lost"}) for r in matches])

# ---------------------------------------------------------------------------- held-out request shapes
# Trained (tool, field) pairs asked for in wording no training template uses: other verbs, the
# value or the person first, the record named last. They measure whether what SFT and GRPO
# taught carries over to new requests for the same actions. NOVEL_PAIR_TEMPLATES measure the
# harder step: a field that no training task writes.


Build = Callable[[random.Random, World, str, tuple[str, ...]], Draft | None]


def _reworded(template: str, build: Build, phrasings: tuple[str, ...]) -> Callable[[random.Random, World], Draft | None]:
    """A template named `template` that drafts what `build` drafts, worded with `phrasings`."""
    def draft(rng: random.Random, w: World) -> Draft | None:
        return build(rng, w, template, phrasings)

    draft.__name__ = draft.__qualname__ = template
    return draft


REWORDED: tuple[Callable[[random.Random, World], Draft | None], ...] = (
    _reworded("email_send_reworded", _email_send, (
        "Drop {f} a note titled '{s}': '{b}'",
        "Let {f} know by email, subject '{s}', that '{b}'",
        "Message for {f} (by email, subject '{s}'): '{b}'")),
    _reworded("calendar_reschedule_reworded", _calendar_reschedule, (
        "The '{n}' with {f} on {day} should begin at {t} instead",
        "Push the start of my '{n}' with {f} on {day} to {t}",
        "Let's do the '{n}' with {f} at {t} on {day}; change the start time")),
    _reworded("calendar_cancel_reworded", _calendar_cancel, (
        "Call off the '{n}' with {f} on {day}",
        "Take the '{n}' with {f} on {day} off my calendar",
        "I can't make the '{n}' with {f} on {day}, so remove it")),
    _reworded("analytics_plot_range_reworded", _plot_range, (
        "Show me {v} from {a} to {b} in a {k} chart",
        "From {a} until {b}, chart the {v} ({k})",
        "Visualise {v} over {a} - {b} with a {k} plot")),
    _reworded("pm_move_task_reworded", _pm_move, (
        "'{t}' is in {l} now; update the task",
        "Shift '{t}' along to the {l} column",
        "Set the list of task '{t}' to {l}")),
    _reworded("pm_reassign_task_reworded", _pm_reassign, (
        "Pass '{t}' on to {f}",
        "Let {f} take over the task '{t}'",
        "Make {f} the assignee of '{t}'")),
    _reworded("crm_update_status_reworded", _crm_status, (
        "Change the CRM status of {c} to {s}",
        "{c} has moved to the {s} stage",
        "Record {c} as {s}")),
    _reworded("crm_update_phone_reworded", _crm_phone, (
        "{c} can now be reached at {v}", "Record {v} as the phone number of {c}",
        "Replace the number we have for {c} with {v}")),
)
REWORDED_TEMPLATES = frozenset(template.__name__ for template in REWORDED)
HELD_OUT_TEMPLATES = REWORDED_TEMPLATES | NOVEL_PAIR_TEMPLATES


TEMPLATES: tuple[Callable[[random.Random, World], Draft | None], ...] = (
    email_send_lookup, email_reply_latest, email_forward_subject, email_delete_latest_from,
    email_delete_subject_batch, email_send_to_customer,
    calendar_create_lookup, calendar_rename_last_on_day, calendar_reschedule, calendar_cancel,
    calendar_change_duration, calendar_cancel_day_with_person, calendar_change_participant,
    analytics_plot_range, analytics_plot_since, analytics_query_then_plot, analytics_two_plots,
    pm_create_lookup, pm_move_task, pm_reassign_task, pm_change_due_date, pm_delete_task, pm_batch_move,
    pm_rename_task, pm_move_board,
    crm_add_lookup, crm_update_status, crm_set_follow_up, crm_delete_customer, crm_reassign_batch,
    crm_stale_proposals_to_lost, crm_update_phone, crm_update_email, crm_add_note, crm_change_product,
    crm_reassign_customer, crm_log_contact,
    *REWORDED,
)


# ---------------------------------------------------------------------------- validation and assembly


def normalise_request(text: str) -> str:
    """The text used for near-duplicate detection: lower-case, no punctuation or filler."""
    text = _FILLER.sub(" ", text.lower())
    return " ".join(_NON_WORD.sub(" ", text).split())


def ground_truth_problems(draft: Draft, base: BaseState) -> list[str]:
    """Why a draft's ground truth does not do what its template says ([] when it does)."""
    sandbox = Sandbox(base)
    problems = [f"{name} failed: {result}" for (name, _), (ok, result)
                in zip(draft.writes, sandbox.apply_writes(draft.writes), strict=True) if not ok]
    made = changes(sandbox.store)
    for table in {e.table for e in draft.effects} | set(made):
        effects = [e for e in draft.effects if e.table == table]
        entry = made.get(table)
        want_changed = {e.row_id for e in effects if e.kind in ("update", "delete")}
        want_deleted = {e.row_id for e in effects if e.kind == "delete"}
        want_created = sum(e.kind == "create" for e in effects)
        if entry is None or entry.changed_ids != want_changed or entry.deleted_ids != want_deleted \
                or entry.created != want_created:
            problems.append(f"{table}: the ground truth changed {entry} instead of {effects}")
            continue
        problems.extend(_value_problems(sandbox, table, effects))
    return problems


def _value_problems(sandbox: Sandbox, table: str, effects: list[Effect]) -> list[str]:
    problems = []
    store = sandbox.store
    if table == PLOTS:
        wanted = sorted(e.values["path"] for e in effects)
        return [] if sorted(store.plots) == wanted else [f"plots {store.plots} != {wanted}"]
    rows = store.tables[table]
    created = [rows[i] for i in store.generated[table] if i in rows]
    for effect in effects:
        if effect.kind == "update":
            row = rows[effect.row_id]
            if any(row.get(k) != v for k, v in effect.values.items()):
                problems.append(f"{table} {effect.row_id}: {row} lacks {effect.values}")
        elif effect.kind == "create" and not any(
            all(r.get(k) == v for k, v in effect.values.items()) for r in created
        ):
            problems.append(f"{table}: no created row has {effect.values}")
    return problems


def split_for(task_id: str, template: str) -> str:
    """Deterministic split: held-out templates always held_out, else by a stable hash."""
    if template in HELD_OUT_TEMPLATES:
        return "held_out"
    bucket = int(hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:8], 16) % 100
    return next(name for name, upper in _SPLIT_BUCKETS if bucket < upper)


_ALL_TOOLS = [spec.to_dict() for spec in TOOL_SPECS]
_TOOLKIT_TOOLS: dict[tuple[str, ...], list[dict[str, Any]]] = {}


def _toolkit_tools(toolkits: tuple[str, ...]) -> list[dict[str, Any]]:
    if toolkits not in _TOOLKIT_TOOLS:
        _TOOLKIT_TOOLS[toolkits] = [spec.to_dict() for spec in tools_for(list(toolkits))]
    return _TOOLKIT_TOOLS[toolkits]


def _call_dicts(calls: list[Call]) -> list[dict[str, Any]]:
    return [{"name": name, "arguments": dict(args)} for name, args in calls]


def draft_to_task(draft: Draft, base: BaseState) -> Task:
    """A validated draft as a Task: system prompt with the date, tools, ground truth, split."""
    key = normalise_request(draft.request)
    task_id = "wp-" + hashlib.sha256(f"{draft.template}\n{key}".encode()).hexdigest()[:16]
    reference = draft.reads + draft.writes
    toolkits = tuple(sorted({toolkit_of(name) for name, _ in reference} - {"company_directory"}))
    full = int(hashlib.sha256(("tools:" + task_id).encode("utf-8")).hexdigest()[:8], 16) % 2 == 0
    return Task(
        id=task_id,
        messages=[{"role": "system", "content": base.system_prompt()},
                  {"role": "user", "content": draft.request}],
        tools=list(_ALL_TOOLS if full else _toolkit_tools(toolkits)),
        ground_truth=_call_dicts(draft.writes),
        category=draft.category,
        split=split_for(task_id, draft.template),
        environment="workplace",
        metadata={
            "template": draft.template,
            "toolset": "all" if full else "toolkits",
            "toolkits": list(toolkits),
            "reference_calls": _call_dicts(reference),
            "num_writes": len(draft.writes),
            "multi_call": len(reference) > 1,
            "state": base.key,
        },
    )


def generate_tasks(n: int, seed: int, *, state: BaseState | None = None) -> list[Task]:
    """`n` unique validated workplace tasks, the same ones (in the same order) for a seed.

    Templates are drawn in turn in a shuffled order; a draft is kept only if its ground
    truth does exactly what the template intends and its normalised text is new. Raises
    when the templates cannot produce `n` unique tasks from this state.
    """
    if n < 0:
        raise ValueError(f"n must be zero or more, got {n}")
    if state is None:
        from environments.workplace.seed import seed_state

        state = seed_state()
    world = World.of(state)
    rng = random.Random(seed)
    tasks: list[Task] = []
    seen: set[str] = set()
    attempts, limit = 0, 50 * n + 100
    while len(tasks) < n:
        attempts += 1
        if attempts > limit:
            raise RuntimeError(
                f"only {len(tasks)} unique workplace tasks after {limit} attempts; ask for "
                f"fewer than {n} or use a state with more data"
            )
        template = TEMPLATES[rng.randrange(len(TEMPLATES))]
        draft = template(rng, world)
        if draft is None or not draft.writes:
            continue
        key = normalise_request(draft.request)
        if key in seen or ground_truth_problems(draft, state):
            continue
        seen.add(key)
        tasks.append(draft_to_task(draft, state))
    return tasks

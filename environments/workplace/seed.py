"""Crucible's own workplace seed data: a fictional company, generated deterministically.

Same five tables and value formats as NeMo Gym's workplace_assistant (ids zero-padded to
8 digits, datetimes "YYYY-MM-DD HH:MM:SS", missing cells None), different content: the
company Orbitra (domain orbitra.com), 40 employees, about 500 emails, 300 meetings held in
working hours, 1,000 website visits, 200 project tasks and 200 customers, all around a
fixed "now" so that relative requests ("last week", "in 3 weeks") have one right answer.
"""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta
from functools import lru_cache

from environments.workplace.state import BaseState, Row, build_base_state

SEED_NOW = "2024-05-16 23:59:00"
"""The sandbox's current time for the seed state (a Thursday)."""
COMPANY_DOMAIN = "orbitra.com"
USER_FIRST_NAME = "Jordan"
"""The person whose inbox and calendar the sandbox holds (not in the directory)."""
_SEED = 20240516

EMPLOYEES: tuple[tuple[str, str, str], ...] = (
    # (first, last, team)
    ("Maya", "Okafor", "Back end"), ("Tomas", "Lindqvist", "Back end"),
    ("Priya", "Raman", "Back end"), ("Daniel", "Ferreira", "Back end"),
    ("Hana", "Kobayashi", "Back end"), ("Omar", "Haddad", "Back end"),
    ("Elena", "Popescu", "Back end"), ("Marcus", "Webb", "Back end"),
    ("Ingrid", "Solberg", "Front end"), ("Kwame", "Asante", "Front end"),
    ("Lucia", "Romero", "Front end"), ("Arjun", "Mehta", "Front end"),
    ("Sophie", "Laurent", "Front end"), ("Ravi", "Shankar", "Front end"),
    ("Zara", "Hussain", "Front end"), ("Felix", "Brandt", "Design"),
    ("Noor", "Siddiqui", "Design"), ("Camila", "Duarte", "Design"),
    ("Theo", "Nakamura", "Design"), ("Amara", "Nwosu", "Design"),
    ("Grace", "Whitfield", "Sales"), ("Diego", "Alvarez", "Sales"),
    ("Mei", "Lin", "Sales"), ("Samuel", "Osei", "Sales"),
    ("Clara", "Bergmann", "Sales"), ("Victor", "Moreau", "Sales"),
    ("Leah", "Goldberg", "Sales"), ("Ahmed", "Karim", "Marketing"),
    ("Freya", "Lund", "Marketing"), ("Nikolai", "Petrov", "Marketing"),
    ("Isabel", "Costa", "Marketing"), ("Ethan", "Brooks", "Operations"),
    ("Yara", "Mansour", "Operations"), ("Julian", "Castillo", "Operations"),
    ("Ayesha", "Malik", "Finance"), ("Benjamin", "Cho", "Finance"),
    ("Olivia", "Grant", "People"), ("Kenji", "Watanabe", "People"),
    ("Rosa", "Delgado", "Leadership"), ("Patrick", "Doyle", "Leadership"),
)

EVENT_NAMES = (
    "Sprint Planning", "Sprint Retrospective", "Design Review", "Architecture Review",
    "one-on-one", "sync up", "Quarterly Business Review", "Customer Onboarding Call",
    "Product Roadmap Session", "Hiring Panel", "Security Awareness Training",
    "Budget Review", "Marketing Campaign Kickoff", "Release Readiness Check",
    "Incident Postmortem", "Team Lunch", "All Hands Prep", "Vendor Negotiation",
    "User Research Readout", "API Design Workshop", "Accessibility Audit",
    "Pipeline Review", "Partner Demo", "Performance Review", "Onboarding Buddy Chat",
    "Data Platform Office Hours", "Brand Refresh Workshop", "Pricing Strategy Discussion",
    "Mentoring Session", "Offsite Planning",
)

_TASK_PARTS = {
    "Back end": (
        ("Add rate limiting to", "Write integration tests for", "Migrate", "Add caching to",
         "Fix timeout in", "Refactor", "Add audit logging to", "Document"),
        ("billing service", "search API", "notification queue", "export job",
         "authentication service", "webhook handler", "reporting pipeline", "invoice generator",
         "user settings endpoint", "file upload service", "payment retries", "session store"),
    ),
    "Front end": (
        ("Fix layout bug in", "Add dark mode to", "Improve loading state of", "Add keyboard shortcuts to",
         "Localise", "Write end-to-end tests for", "Reduce bundle size of", "Polish"),
        ("checkout page", "settings panel", "onboarding flow", "dashboard charts",
         "pricing page", "search results page", "team invite dialog", "mobile navigation",
         "notifications drawer", "profile page", "data table", "login form"),
    ),
    "Design": (
        ("Create wireframe for", "Design icons for", "Run usability test of", "Update style guide for",
         "Prototype", "Design empty states for", "Review copy for", "Create mockups for"),
        ("onboarding flow", "billing page", "mobile app home", "admin console",
         "marketing site hero", "help center", "report builder", "team dashboard",
         "email templates", "error pages", "settings redesign", "integration gallery"),
    ),
}
LIST_WEIGHTS = {"Backlog": 45, "In Progress": 20, "In Review": 15, "Completed": 20}

CUSTOMER_FIRST = (
    "Avery", "Blake", "Cameron", "Dakota", "Emerson", "Finley", "Harper", "Jamie", "Kendall",
    "Logan", "Morgan", "Parker", "Quinn", "Reese", "Riley", "Rowan", "Sawyer", "Skyler",
    "Taylor", "Hayden",
)
CUSTOMER_LAST = (
    "Abbott", "Barnes", "Carver", "Dalton", "Ellison", "Foster", "Garrison", "Holloway",
    "Ingram", "Jennings", "Keller", "Lawson", "Mercer", "Norwood", "Prescott", "Ramsey",
    "Sterling", "Thornton", "Vaughn", "Whitaker",
)
CUSTOMER_COMPANIES = (
    "brightpath", "cobaltworks", "deltaforge", "evergreenlogistics", "fjordfoods", "granitebio",
    "harborline", "ironleaf", "junipermedia", "keystonehealth", "lumenretail", "maplecrest",
    "novaparts", "oakridgeenergy", "pinnaclefin", "quartzlabs", "riverstone", "summitauto",
)
STATUS_WEIGHTS = {"Lead": 22, "Qualified": 18, "Proposal": 20, "Won": 22, "Lost": 18}
PRODUCTS = ("Software", "Hardware", "Services", "Consulting", "Training")
TRAFFIC_WEIGHTS = {"direct": 50, "social media": 25, "search engine": 14, "referral": 11}


def employee_email(first: str, last: str) -> str:
    return f"{first.lower()}.{last.lower()}@{COMPANY_DOMAIN}"


def _ids(count: int) -> list[str]:
    return [str(i).zfill(8) for i in range(count)]


def _weighted(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _workday(rng: random.Random, first: date, last: date) -> date:
    while True:
        day = first + timedelta(days=rng.randrange((last - first).days + 1))
        if day.weekday() < 5:
            return day


def _task_names() -> dict[str, list[str]]:
    return {
        board: [f"{verb} {thing}" for verb in verbs for thing in things]
        for board, (verbs, things) in _TASK_PARTS.items()
    }


def _project_tasks(rng: random.Random) -> list[Row]:
    names = {board: rng.sample(pool, len(pool)) for board, pool in _task_names().items()}
    staff = {board: [employee_email(f, last) for f, last, team in EMPLOYEES if team == board]
             for board in names}
    boards = list(names)
    rows = []
    for index, task_id in enumerate(_ids(200)):
        board = boards[index % 3] if index < 198 else rng.choice(boards)
        due = date(2024, 5, 1) + timedelta(days=rng.randrange(46))
        rows.append({
            "task_id": task_id,
            "task_name": names[board].pop(),
            "assigned_to_email": rng.choice(staff[board]),
            "list_name": _weighted(rng, LIST_WEIGHTS),
            "due_date": due.isoformat(),
            "board": board,
        })
    rng.shuffle(rows)
    return rows


def _email_text(rng: random.Random, to_first: str, from_first: str, tasks: list[Row]) -> tuple[str, str]:
    task = rng.choice(tasks)["task_name"]
    event = rng.choice(EVENT_NAMES)
    kind = rng.randrange(5)
    if kind == 0:
        subject = f"Task Update on {task}"
        line = rng.choice((
            f"Finished '{task}' and it is ready for your review.",
            f"I'm blocked on '{task}' until the staging environment is back. Could you help?",
            f"Made good progress on '{task}'; expect a pull request tomorrow.",
        ))
    elif kind == 1:
        subject = f"Update on {event}"
        line = rng.choice((
            f"Agenda for the {event} is in the shared folder.",
            f"Could we move the {event} to later in the week?",
            f"Notes from the {event} are attached; two action items are for you.",
        ))
    elif kind == 2:
        topic = rng.choice(("the Q2 budget", "the hiring plan", "the offsite", "the roadmap",
                            "the vendor contract", "the launch checklist"))
        subject = f"Question about {topic}"
        line = f"Quick question about {topic}: do you have the latest numbers?"
    elif kind == 3:
        subject = f"Feedback on {task}"
        line = f"I reviewed '{task}' and left comments; overall it looks solid."
    else:
        subject = f"Reminder: {event}"
        line = f"Friendly reminder that the {event} is coming up. Please bring your updates."
    signoff = rng.choice(("Best", "Thanks", "Cheers", "Regards"))
    return subject, f"{to_first},\n\n{line}\n\n{signoff},\n{from_first}"


def _emails(rng: random.Random, tasks: list[Row]) -> list[Row]:
    stamps = sorted(
        datetime.combine(_workday(rng, date(2024, 3, 18), date(2024, 5, 16)), datetime.min.time())
        + timedelta(seconds=rng.randrange(9 * 3600, 18 * 3600))
        for _ in range(500)
    )
    ids = _ids(500)
    rng.shuffle(ids)
    rows = []
    for email_id, stamp in zip(ids, stamps, strict=True):
        first, last, _ = rng.choice(EMPLOYEES)
        outbox = rng.random() < 0.1
        to_first, from_first = (first, USER_FIRST_NAME) if outbox else (USER_FIRST_NAME, first)
        subject, body = _email_text(rng, to_first, from_first, tasks)
        rows.append({
            "email_id": email_id,
            "inbox/outbox": "outbox" if outbox else "inbox",
            "sender/recipient": employee_email(first, last),
            "subject": subject,
            "sent_datetime": stamp.strftime("%Y-%m-%d %H:%M:%S"),
            "body": body,
        })
    return rows


def _calendar_events(rng: random.Random) -> list[Row]:
    rows = []
    ids = _ids(300)
    rng.shuffle(ids)
    for event_id in ids:
        duration = rng.choice((30, 60, 90, 120))
        latest_start = 18 * 60 - duration
        start_minutes = 9 * 60 + 30 * rng.randrange((latest_start - 9 * 60) // 30 + 1)
        day = _workday(rng, date(2024, 3, 1), date(2024, 6, 28))
        start = datetime.combine(day, datetime.min.time()) + timedelta(minutes=start_minutes)
        first, last, _ = rng.choice(EMPLOYEES)
        rows.append({
            "event_id": event_id,
            "event_name": rng.choice(EVENT_NAMES),
            "participant_email": employee_email(first, last),
            "event_start": start.strftime("%Y-%m-%d %H:%M:%S"),
            "duration": str(duration),
        })
    rows.sort(key=lambda r: r["event_start"])
    return rows


def _analytics(rng: random.Random) -> list[Row]:
    visitors = rng.sample(range(10000), 900)
    rows = []
    for _ in range(1000):
        day = date(2024, 2, 17) + timedelta(days=rng.randrange(90))
        rows.append({
            "date_of_visit": day.isoformat(),
            "visitor_id": str(rng.choice(visitors)).zfill(4),
            "page_views": str(rng.randint(1, 15)),
            "session_duration_seconds": str(rng.randint(1, 30)),
            "traffic_source": _weighted(rng, TRAFFIC_WEIGHTS),
            "user_engaged": str(rng.random() < 0.4),
        })
    return rows


def _crm(rng: random.Random) -> list[Row]:
    names = rng.sample([(f, la) for f in CUSTOMER_FIRST for la in CUSTOMER_LAST], 200)
    reps = [employee_email(f, la) for f, la, team in EMPLOYEES if team == "Sales"]
    rows = []
    for customer_id, (first, last) in zip(_ids(200), names, strict=True):
        contacted = date(2024, 3, 15) + timedelta(days=rng.randrange(63))
        follow_up = contacted + timedelta(days=rng.randrange(7, 45))
        notes = " ".join(
            f"{contacted - timedelta(days=rng.randrange(1, 30)):%Y-%m-%d}: "
            f"{rng.choice(('Had a call.', 'Sent pricing.', 'Saw the demo.', 'Asked for references.'))}"
            for _ in range(rng.randrange(3))
        )
        rows.append({
            "customer_id": customer_id,
            "assigned_to_email": rng.choice(reps),
            "customer_name": f"{first} {last}",
            "customer_email": f"{first.lower()}.{last.lower()}@{rng.choice(CUSTOMER_COMPANIES)}.com",
            "customer_phone": (f"{rng.randint(200, 989)}-{rng.randint(200, 999)}-{rng.randint(1000, 9999)}"
                               if rng.random() < 0.6 else None),
            "last_contact_date": f"{contacted.isoformat()} 23:59:00",
            "product_interest": rng.choice(PRODUCTS),
            "status": _weighted(rng, STATUS_WEIGHTS),
            "follow_up_by": f"{follow_up.isoformat()} 23:59:00",
            "notes": notes + " " if notes else None,
        })
    rng.shuffle(rows)
    return rows


@lru_cache(maxsize=1)
def seed_state() -> BaseState:
    """The default workplace state (cached: it is immutable and shared by every sandbox)."""
    rng = random.Random(_SEED)
    tasks = _project_tasks(rng)
    tables = {
        "emails": _emails(rng, tasks),
        "calendar_events": _calendar_events(rng),
        "analytics_data": _analytics(rng),
        "project_tasks": tasks,
        "customer_relationship_manager_data": _crm(rng),
    }
    directory = sorted(employee_email(first, last) for first, last, _ in EMPLOYEES)
    return build_base_state("seed", tables, directory=directory, now=SEED_NOW)

"""Server paths (issue 33, holes 1 and 4): a checkpoint's files are opened only from inside its own
run's folder, and a run config from a request never holds a path on the server."""

from __future__ import annotations

import io
import json
import os
import re
import zipfile

import pytest

from webapp.runs.models import Checkpoint, Experiment, Job, ModelSpec, Run
from webapp.runs.services.paths import ELSEWHERE, GONE, PRESENT, checkpoint_folder, local_path
from webapp.runs.services.run_config import ConfigError, run_process_config
from webapp.trajectories.models import ReviewQueue

ADAPTER = {"adapter_model.safetensors": b"weights", "adapter_config.json": b"{}"}


def _folder(path, files: dict[str, bytes]):
    for name, content in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(content)
    return path


@pytest.fixture
def data_dir(settings, tmp_path):
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    settings.DATA_DIR = data
    settings.CRUCIBLE_RUNS_DIR = data / "runs"
    settings.CRUCIBLE_MODEL_ROOTS = [data / "models"]
    return data


@pytest.fixture
def world(project_team, data_dir):
    """Project A with an imported run; project B (a stranger's) with a run whose checkpoint is on disk;
    someone's pending upload under the data dir's imports."""
    a, b = project_team["project"], project_team["other"]
    ours = Run.objects.create(project=a, name="imported", kind="grpo", import_key="k" * 64)
    theirs = Run.objects.create(project=b, name="secret", kind="grpo")
    their_folder = _folder(data_dir / "runs" / theirs.folder_name / "checkpoints" / "step_1",
                           {**ADAPTER, "secret.txt": b"B's data"})
    Checkpoint.objects.create(run=theirs, step=1, storage_uri=str(their_folder))
    _folder(data_dir / "imports" / "upload-1", {"events.jsonl": b"{}"})
    return {"a": a, "b": b, "ours": ours, "theirs": theirs, "their_folder": their_folder, "slug": a.slug}


def _hostile_uris(world, data_dir) -> dict[str, str]:
    ours = data_dir / "runs" / world["ours"].folder_name
    theirs = world["their_folder"]
    rel = f"{world['theirs'].folder_name}/checkpoints/step_1"
    return {
        "file-uri": f"file://{theirs}",
        "file-localhost": f"file://localhost{theirs}",
        "file-runs": f"file://{data_dir}/runs",
        "file-imports": f"file://{data_dir}/imports",
        "file-upload": f"file://{data_dir}/imports/upload-1",
        "file-dotdot": f"file://{ours}/../{rel}",
        "file-encoded-dotdot": f"file://{ours}/%2e%2e/{rel}",
        "plain-dotdot": f"{ours}/checkpoints/../../{rel}",
        "plain-other": str(theirs),
        "data-dir": str(data_dir),
        "own-run-root": str(ours),
        "relative": f"runs/{rel}",
        "other-scheme": f"s3://bucket/{rel}",
        "imported": f"imported://{theirs}",
    }


HOSTILE = ["file-uri", "file-localhost", "file-runs", "file-imports", "file-upload", "file-dotdot",
           "file-encoded-dotdot", "plain-dotdot", "plain-other", "data-dir", "own-run-root", "relative",
           "other-scheme", "imported", "symlink"]


def _hostile_checkpoint(world, data_dir, where: str) -> Checkpoint:
    if where == "symlink":  # a link inside our own run folder that leads into theirs
        ours = data_dir / "runs" / world["ours"].folder_name / "checkpoints"
        ours.mkdir(parents=True)
        os.symlink(world["their_folder"], ours / "step_5")
        uri = str(ours / "step_5")
    else:
        uri = _hostile_uris(world, data_dir)[where]
    return Checkpoint.objects.create(run=world["ours"], step=5, storage_uri=uri, kind="adapter")


# ---------------------------------------------------------------------------------------
# Hole 1: downloads, exports and jobs open only the run's own folder
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", HOSTILE)
def test_an_imported_checkpoint_outside_its_run_folder_is_never_served(client, project_team, world, data_dir,
                                                                       where):
    ckpt = _hostile_checkpoint(world, data_dir, where)
    assert checkpoint_folder(ckpt) == (None, ELSEWHERE)
    client.force_login(project_team["viewer"])
    response = client.get(f"/p/{world['slug']}/checkpoints/{ckpt.pk}/download/")
    assert response.status_code == 404 and not hasattr(response, "streaming_content")
    assert "are not on this server" in response.content.decode()
    row = re.search(rf'<tr data-checkpoint="{ckpt.pk}".*?</tr>',
                    client.get(f"/p/{world['slug']}/checkpoints/").content.decode(), re.S).group(0)
    assert "not on this server" in row and "/download/" not in row and "Export merged" not in row


@pytest.mark.parametrize("where", HOSTILE)
def test_an_imported_checkpoint_outside_its_run_folder_is_never_exported(client, project_team, world, data_dir,
                                                                         where):
    ckpt = _hostile_checkpoint(world, data_dir, where)
    client.force_login(project_team["editor"])
    response = client.post(f"/p/{world['slug']}/checkpoints/{ckpt.pk}/export/", follow=True)
    assert any("are not on this server" in str(m) for m in response.context["messages"])
    assert not Job.objects.filter(kind="export").exists()


def test_the_api_says_where_the_weights_are(client, project_team, world, data_dir, bearer):
    hostile = _hostile_checkpoint(world, data_dir, "file-dotdot")
    own = _folder(data_dir / "runs" / world["ours"].folder_name / "checkpoints" / "step_9", ADAPTER)
    kept = Checkpoint.objects.create(run=world["ours"], step=9, storage_uri=f"file://{own}")
    gone = Checkpoint.objects.create(run=world["ours"], step=7, storage_uri=str(own.parent / "step_7"))
    items = client.get(f"/api/projects/{world['slug']}/checkpoints", **bearer("viewer")).json()["items"]
    folders = {item["id"]: item["folder"] for item in items}
    assert folders == {hostile.pk: ELSEWHERE, kept.pk: PRESENT, gone.pk: GONE}


def test_a_file_uri_inside_the_runs_own_folder_downloads(client, project_team, world, data_dir):
    own = _folder(data_dir / "runs" / world["ours"].folder_name / "checkpoints" / "step_9", ADAPTER)
    ckpt = Checkpoint.objects.create(run=world["ours"], step=9, storage_uri=f"file://{own}/../step_9")
    client.force_login(project_team["viewer"])
    response = client.get(f"/p/{world['slug']}/checkpoints/{ckpt.pk}/download/")
    assert response.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert sorted(name.split("/", 1)[1] for name in archive.namelist()) == sorted(ADAPTER)


@pytest.mark.parametrize("where", ["file-dotdot", "plain-other", "symlink"])
def test_a_job_never_starts_from_a_checkpoint_outside_its_run_folder(project_team, world, data_dir, where):
    parent = _hostile_checkpoint(world, data_dir, where)
    run = Run.objects.create(project=world["a"], name="from it", kind="eval", parent_checkpoint=parent,
                             config={"kind": "eval"})
    run_dir = data_dir / "runs" / run.folder_name
    with pytest.raises(ConfigError, match="'init_checkpoint' cannot be loaded.*are not on this server"):
        run_process_config(run, run_dir)


def test_a_job_starts_from_its_parents_resolved_folder(project_team, world, data_dir):
    own = _folder(data_dir / "runs" / world["ours"].folder_name / "checkpoints" / "step_9", ADAPTER)
    parent = Checkpoint.objects.create(run=world["ours"], step=9, storage_uri=f"file://{own}")
    run = Run.objects.create(project=world["a"], name="from it", kind="eval", parent_checkpoint=parent,
                             config={"kind": "eval"})
    config = run_process_config(run, data_dir / "runs" / run.folder_name)
    assert config["init_checkpoint"] == str(own.resolve())


def test_a_checkpoint_of_another_project_is_never_loaded(project_team, world, data_dir):
    theirs = world["theirs"].checkpoints.get()
    run = Run.objects.create(project=world["a"], name="borrow", kind="eval", parent_checkpoint=theirs,
                             config={"kind": "eval"})
    with pytest.raises(ConfigError, match="another project"):
        run_process_config(run, data_dir / "runs" / run.folder_name)


@pytest.mark.parametrize(("text", "expected"), [
    ("file:///a/b/../c", "/a/c"), ("file://localhost/a/b", "/a/b"), ("file:///a/%2e%2e/b", "/b"),
    ("/a/./b/../c", "/a/c"), ("file://host/a", None), ("s3://b/k", None), ("imported:///a", None),
    ("a/b", None), ("", None), ("/a\x00b", None), ("file:///a%00b", None), ("FILE:///a", "/a"),
])
def test_local_path_normalises_every_form(text, expected):
    found = local_path(text)
    assert (str(found) if found is not None else None) == expected


# ---------------------------------------------------------------------------------------
# The export job itself
# ---------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_export_job_ignores_a_payload_source_outside_the_run_folder(project_team, data_dir, monkeypatch):
    import training.export
    from workers.runner import run_job

    def never(*args, **kwargs):
        raise AssertionError("merged a folder outside the run")

    monkeypatch.setattr(training.export, "export_checkpoint", never)
    a, b = project_team["project"], project_team["other"]
    ours = Run.objects.create(project=a, name="imported", kind="grpo", import_key="j" * 64)
    theirs = Run.objects.create(project=b, name="secret", kind="grpo")
    their_folder = _folder(data_dir / "runs" / theirs.folder_name / "checkpoints" / "step_1", ADAPTER)
    ckpt = Checkpoint.objects.create(run=ours, step=1, storage_uri=f"file://{their_folder}")
    out = data_dir / "runs" / ours.folder_name / "exports" / "step_1"
    job = Job.objects.create(project=a, kind="export", queue="rollout",
                             payload={"checkpoint_id": ckpt.pk, "source": str(their_folder), "out": str(out)})
    assert run_job(job.pk, worker="test") == "failed"
    job.refresh_from_db()
    assert "are not on this server" in job.error
    elsewhere = Job.objects.create(project=a, kind="export", queue="rollout",
                                   payload={"checkpoint_id": ckpt.pk, "out": str(their_folder.parent)})
    assert run_job(elsewhere.pk, worker="test") == "failed"
    elsewhere.refresh_from_db()
    assert "is not inside the folder of run" in elsewhere.error


# ---------------------------------------------------------------------------------------
# Hole 4: a run config from a request never holds a path
# ---------------------------------------------------------------------------------------


@pytest.fixture
def links(project_team, data_dir):
    from environments.workplace.generator import generate_tasks
    from webapp.datasets.services.datasets import dataset_create
    from webapp.verifiers.services.verifiers import verifier_create

    project, owner = project_team["project"], project_team["owner"]
    dataset_create(project=project, name="wp", tasks=generate_tasks(4, 0), actor=owner)
    verifier_create(project=project, name="exact", kind="json_tool_call", config={}, actor=owner)
    ModelSpec.objects.create(project=project, name="tiny", hf_id="HuggingFaceTB/SmolLM2-135M-Instruct")
    theirs = ReviewQueue.objects.create(project=project_team["other"], name="theirs", kind="pair")
    return {"slug": project.slug, "project": project, "their_queue": theirs}


JUDGE = {"name": "llm_judge", "config": {"base_url": "http://169.254.169.254/v1", "model": "m", "rubric": "r",
                                         "api_key_env": "SECRET_KEY"}}
RAW_PATHS = [
    ("dataset", "/etc/passwd", "dataset"), ("dataset", "file:///etc/passwd", "dataset"),
    ("dataset", "../../exports/tasks.jsonl", "dataset"),
    ("init_checkpoint", "/tmp", "parent_checkpoint_id"),
    ("preference_pairs", "/etc/passwd", "review_queue:"), ("preference_pairs", "review_queue:../1", "review_queue:"),
    ("reviewed_trajectories", "/etc/passwd", "dataset"),
    ("model", "/etc", "register"), ("model", "~/.ssh", "register"), ("model", "../../etc", "register"),
    ("model", "weights.gguf", "Hugging Face id"), ("model", "file:///models/x", "register"),
    ("model", "webapp", "working directory"),
    ("model_gguf_file", "../../../etc/passwd.gguf", "file's name inside"),
    ("model_gguf_file", "/etc/x.gguf", "file's name inside"),
    ("verifier", JUDGE, "save it as one of this project's verifiers"),
    ("reward", "llm_judge", "save it as one of this project's verifiers"),
]


def _run_body(key: str, value) -> dict:
    kind = {"preference_pairs": "dpo", "reviewed_trajectories": "sft"}.get(key, "grpo")
    config = {"device": "cpu", "max_steps": 2, key: value}
    if key == "reviewed_trajectories":
        config["sft_source"] = "reviewed"
    body = {"name": "probe", "kind": kind, "config": config, "dataset": "wp", "model": "tiny"}
    if key not in ("verifier", "reward"):
        body["verifier"] = "exact"
    return body


@pytest.mark.parametrize(("key", "value", "instead"), RAW_PATHS, ids=[f"{k}={str(v)[:30]}" for k, v, _ in RAW_PATHS])
def test_a_raw_path_in_an_api_run_config_is_a_422_naming_the_field(client, links, bearer, key, value, instead):
    before = (Run.objects.count(), Job.objects.count())
    response = client.post(f"/api/projects/{links['slug']}/runs", json.dumps(_run_body(key, value)),
                           content_type="application/json", **bearer("editor"))
    assert response.status_code == 422, response.content
    errors = response.json()["errors"]
    assert list(errors) == [f"config.{key}"] and instead in errors[f"config.{key}"]
    assert (Run.objects.count(), Job.objects.count()) == before


def test_another_projects_review_queue_is_refused(client, links, bearer):
    body = _run_body("preference_pairs", f"review_queue:{links['their_queue'].pk}")
    response = client.post(f"/api/projects/{links['slug']}/runs", json.dumps(body), content_type="application/json",
                           **bearer("editor"))
    assert response.status_code == 422 and "does not have" in response.json()["errors"]["config.preference_pairs"]
    assert not Run.objects.exists()


def test_a_dpo_run_names_its_review_queue_and_the_job_gets_the_pairs_from_the_server(client, links, bearer,
                                                                                    data_dir):
    queue = ReviewQueue.objects.create(project=links["project"], name="mine", kind="pair")
    body = _run_body("preference_pairs", f"review_queue:{queue.pk}")
    response = client.post(f"/api/projects/{links['slug']}/runs", json.dumps(body), content_type="application/json",
                           **bearer("editor"))
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    run_dir = data_dir / "runs" / run.folder_name
    run_dir.mkdir()  # the worker makes it before it builds the config
    with pytest.raises(ConfigError, match="no preference label yet"):  # written by the server at job start
        run_process_config(run, run_dir)


def test_a_raw_path_in_a_stored_config_stops_the_job(project_team, links, data_dir):
    run = Run.objects.create(project=links["project"], name="legacy", kind="grpo",
                             config={"kind": "grpo", "dataset": "/etc/passwd"})
    with pytest.raises(ConfigError, match="'dataset' cannot be a path"):
        run_process_config(run, data_dir / "runs" / run.folder_name)


def test_the_run_form_refuses_a_raw_path_beside_its_field(client, project_team, links):
    client.force_login(project_team["editor"])
    response = client.post(f"/p/{links['slug']}/runs/new/", {
        "name": "probe", "kind": "grpo", "cfg.dataset": "/etc/passwd", "cfg.model": "/etc", "cfg.device": "cpu"})
    body = response.content.decode()
    assert response.status_code == 422 and "cannot be a path from a request" in body and "register it" in body
    assert not Run.objects.exists()


def test_an_experiment_with_a_path_in_a_stage_config_is_refused(project_team, links):
    from webapp.runs.services.experiments import ExperimentError, experiment_create

    project = links["project"]
    with pytest.raises(ExperimentError, match="config.grpo: 'init_checkpoint' cannot be a path"):
        experiment_create(project=project, name="e", dataset=project.datasets.first(),
                          verifier_version=project.verifiers.first().latest_version,
                          model=project.model_specs.first(), actor=project_team["owner"],
                          config={"grpo": {"init_checkpoint": "/tmp/ckpt"}})
    assert not Experiment.objects.exists() and not Run.objects.exists()


# ---------------------------------------------------------------------------------------
# Model folders: only under the operator's model roots
# ---------------------------------------------------------------------------------------


def test_a_model_folder_is_registered_only_under_the_model_roots(project_team, data_dir, tmp_path):
    from webapp.runs.services.models import ModelSpecError, model_spec_create

    project, owner = project_team["project"], project_team["owner"]
    inside = _folder(data_dir / "models" / "tiny", {"config.json": b"{}"})
    outside = _folder(tmp_path / "elsewhere" / "tiny", {"config.json": b"{}"})
    (data_dir / "models" / "link").symlink_to(outside)
    model = model_spec_create(project=project, name="ok", source=str(inside), actor=owner)
    assert model.local_path == str(inside.resolve())
    for name, source in (("out", str(outside)), ("link", str(data_dir / "models" / "link")),
                         ("dots", f"{inside}/../../../elsewhere/tiny"), ("root", str(data_dir / "models")),
                         ("etc", "/etc")):
        with pytest.raises(ModelSpecError) as caught:
            model_spec_create(project=project, name=name, source=source, actor=owner)
        assert "model roots" in caught.value.errors["source"], name
    assert list(ModelSpec.objects.filter(project=project).values_list("name", flat=True)) == ["ok"]


def test_a_registered_folder_outside_the_roots_is_refused_for_a_run(client, links, bearer, tmp_path, data_dir):
    ModelSpec.objects.create(project=links["project"], name="legacy", local_path=str(tmp_path))
    body = {**_run_body("device", "cpu"), "model": "legacy"}
    response = client.post(f"/api/projects/{links['slug']}/runs", json.dumps(body), content_type="application/json",
                           **bearer("editor"))
    assert response.status_code == 422 and "model roots" in response.json()["errors"]["model"]
    assert not Run.objects.exists()

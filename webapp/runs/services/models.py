"""Writes for a project's models (ModelSpec): register one, remove one nothing uses.

A model's source is one piece of text, as a person types it: an existing absolute folder on
this machine is a local model (local_path), allowed only under the model roots the operator
configured (CRUCIBLE_MODEL_ROOTS), so a registered model cannot make a job read the server's
other files; anything else must be a Hugging Face id (hf_id); the offline default's aliases
("smollm2", "smollm2-135m-instruct") are hub-id-like names the training code resolves itself.
Every check happens here, so a page and an API endpoint that call model_spec_create accept
exactly the same input; errors are keyed by field. The run config service applies the same
checks (hf_id_problem, gguf_name_problem) to a request's `model` and `model_gguf_file`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from webapp.common.bounds import text_field_problem
from webapp.projects.models import Project
from webapp.projects.services.projects import audit_log
from webapp.runs.models import Experiment, ModelSpec, Run
from webapp.runs.services.paths import local_path, model_root_folder, model_roots, strictly_inside

MODEL_NAME_MAX = ModelSpec._meta.get_field("name").max_length
HF_ID_MAX = ModelSpec._meta.get_field("hf_id").max_length
LOCAL_PATH_MAX = ModelSpec._meta.get_field("local_path").max_length
GGUF_FILE_MAX = ModelSpec._meta.get_field("gguf_file").max_length
MODEL_SOURCE_MAX = max(HF_ID_MAX, LOCAL_PATH_MAX)
TOOL_FORMATS = tuple(value for value, _ in ModelSpec._meta.get_field("tool_format").choices)
GGUF_FILES_LISTED = 10
# training.models.MODEL_ALIASES (not imported: that module loads torch): the offline default's names.
MODEL_ALIASES = frozenset({"smollm2-135m-instruct", "smollm2"})
# huggingface_hub's repo id rule: [namespace/]name of letters, digits, - _ . ; no "--" or "..".
HF_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")


class ModelSpecError(ValueError):
    """The input cannot make a model: `errors` maps each field (name, source, gguf_file, tool_format) to why."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__(" ".join(errors.values()))


class ModelSpecInUse(ValueError):
    """Runs or experiments use the model: it cannot be removed while they exist."""

    def __init__(self, model: ModelSpec, runs: int, experiments: int):
        self.runs, self.experiments = runs, experiments
        uses = [f"{n} {what}{'' if n == 1 else 's'}" for n, what in ((runs, "run"), (experiments, "experiment")) if n]
        super().__init__(f"“{model.name}” is used by {' and '.join(uses) or 'a run'}, so it cannot be removed: "
                         "runs keep the model they were trained or evaluated with.")


_text_problem = text_field_problem


def _is_folder(path: str | Path) -> bool:
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):  # a name too long for the file system, and the like
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def hf_id_problem(text: str) -> str | None:
    """Why `text` is not a Hugging Face id (or an alias of the offline default), or None.

    Paths are refused whatever their form (absolute, ~, ./, ../, a .gguf file, a name that is
    a folder in the worker's working directory), since the training process would open them.
    """
    if text.lower() in MODEL_ALIASES:
        return None
    example = "e.g. HuggingFaceTB/SmolLM2-135M-Instruct"
    if not HF_ID.match(text) or "--" in text or ".." in text or text.endswith((".", "-")):
        return f"must be a Hugging Face id ({example}), got {text[:80]!r}."
    if text.lower().endswith(".gguf"):
        return f"names a .gguf file, which would be read from this server: give a Hugging Face id ({example})."
    if os.path.lexists(Path(settings.BASE_DIR) / text):
        return (f"{text!r} is also a folder or file of this server's working directory, which training would "
                f"read instead of the hub: give the full Hugging Face id ({example}).")
    return None


def gguf_name_problem(gguf_file: str) -> str | None:
    """Why `gguf_file` is not the name of a .gguf file inside a model folder or repository, or None."""
    if not gguf_file.lower().endswith(".gguf"):
        return "must be the name of a .gguf file, e.g. model-q8_0.gguf."
    parts = Path(gguf_file.replace("\\", "/")).parts
    if gguf_file.startswith(("/", "~", "\\")) or os.path.isabs(gguf_file) or ".." in parts or "\x00" in gguf_file:
        return "must be the file's name inside the model's folder or repository, not a path elsewhere: e.g. model-q8_0.gguf."
    return None


def _roots_text() -> str:
    return ", ".join(str(root) for root in model_roots()) or "none configured"


def registered_model_problem(model: ModelSpec) -> str | None:
    """Why a job may not load this registered model, or None: a folder outside the model roots."""
    if not model.local_path:
        return None
    if model_root_folder(model.local_path) is None:
        return (f"'model' {model.name!r} is the folder {model.local_path}, which is not under this server's model "
                f"roots ({_roots_text()}): the operator adds roots with CRUCIBLE_MODEL_ROOTS; or register a Hugging "
                "Face id instead.")
    return None


def _gguf_problem(gguf_file: str, *, local_path: str, alias: bool) -> str | None:
    if alias:
        return ("The offline default model is a GGUF file already: leave the GGUF file empty "
                "(it picks one file inside a folder or a Hugging Face repository).")
    if not gguf_file.lower().endswith(".gguf"):
        return "Give the name of a .gguf file, e.g. model-q8_0.gguf."
    if gguf_name_problem(gguf_file):
        return "Give the file's name inside the folder or repository, not a path elsewhere: e.g. model-q8_0.gguf."
    if local_path and not _gguf_inside(Path(local_path), gguf_file):
        found = sorted(p.name for p in Path(local_path).glob("*.gguf"))
        listed = ", ".join(found[:GGUF_FILES_LISTED]) + (", …" if len(found) > GGUF_FILES_LISTED else "")
        return f"There is no {gguf_file} in {local_path}; its .gguf files: {listed or 'none'}."
    return None


def _gguf_inside(folder: Path, gguf_file: str) -> bool:
    """Whether the file exists inside `folder` once symlinks are resolved (a link may not lead out)."""
    path = local_path(str(folder / gguf_file))
    return path is not None and strictly_inside(path, folder.resolve()) and _is_file(path)


def _folder_source(expanded: str, source: str) -> tuple[dict[str, str], str | None]:
    """A typed absolute path: a model folder under the model roots, or what to fix."""
    if not _is_folder(expanded):
        return {}, (f"There is no folder {source} on this machine. Give an existing model folder (for a .gguf "
                    "file, its folder here and the file's name under GGUF file), or a Hugging Face id.")
    folder = model_root_folder(expanded)
    if folder is None:
        return {}, (f"The folder {source} is not under this server's model roots ({_roots_text()}): put the model "
                    "in one of them (the operator sets them with CRUCIBLE_MODEL_ROOTS), or give a Hugging Face id.")
    if len(str(folder)) > LOCAL_PATH_MAX:
        return {}, f"The folder's path is {len(str(folder))} characters long; at most {LOCAL_PATH_MAX} are allowed."
    return {"local_path": str(folder)}, None


def model_source(source: str) -> tuple[dict[str, str], str | None]:
    """({"hf_id": …} or {"local_path": …}, None) for a typed source, or ({}, what to fix)."""
    source = source.strip()
    if not source:
        return {}, "Give a Hugging Face id (e.g. HuggingFaceTB/SmolLM2-135M-Instruct) or a model folder on this machine."
    problem = _text_problem("source", source, MODEL_SOURCE_MAX)
    if problem:
        return {}, problem
    if source.lower() in MODEL_ALIASES:
        return {"hf_id": source.lower()}, None
    expanded = os.path.expanduser(source)
    if os.path.isabs(expanded):
        return _folder_source(expanded, source)
    if any(ch.isspace() for ch in source):
        return {}, "A Hugging Face id has no spaces, e.g. HuggingFaceTB/SmolLM2-135M-Instruct."
    if len(source) > HF_ID_MAX:
        return {}, f"The Hugging Face id is {len(source)} characters long; at most {HF_ID_MAX} are allowed."
    problem = hf_id_problem(source)
    if problem:
        return {}, f"The source {problem[0].lower()}{problem[1:]} A folder is given by its absolute path."
    return {"hf_id": source}, None


def model_spec_create(*, project: Project, name: str, source: str, gguf_file: str = "", tool_format: str = "auto",
                      actor) -> ModelSpec:
    """Register a model in the project (audited); ModelSpecError names every field to fix."""
    name, gguf_file = name.strip(), gguf_file.strip()
    errors: dict[str, str] = {}
    problem = _text_problem("name", name, MODEL_NAME_MAX)
    if problem:
        errors["name"] = problem
    elif not name:
        errors["name"] = "Give the model a name: the runs and experiment forms list it by this name."
    where, source_problem = model_source(source)
    if source_problem:
        errors["source"] = source_problem
    if gguf_file:
        problem = _text_problem("GGUF file", gguf_file, GGUF_FILE_MAX)
        if problem is None and source_problem is None:  # where it lives is known: check it is there
            problem = _gguf_problem(gguf_file, local_path=where.get("local_path", ""),
                                    alias=where.get("hf_id", "") in MODEL_ALIASES)
        if problem:
            errors["gguf_file"] = problem
    if tool_format not in TOOL_FORMATS:
        errors["tool_format"] = f"Choose one of the tool formats: {', '.join(TOOL_FORMATS)}."
    if "name" not in errors and ModelSpec.objects.filter(project=project, name=name).exists():
        errors["name"] = _duplicate(name)
    if errors:
        raise ModelSpecError(errors)
    try:
        with transaction.atomic():
            model = ModelSpec.objects.create(project=project, name=name, gguf_file=gguf_file,
                                             tool_format=tool_format, **where)
            audit_log(project=project, actor=actor, action="model.create", target=model,
                      data={"name": name, **where, "gguf_file": gguf_file, "tool_format": tool_format})
    except IntegrityError:  # created by someone else in the meantime
        raise ModelSpecError({"name": _duplicate(name)}) from None
    return model


def _duplicate(name: str) -> str:
    return f"This project has a model named “{name}” already: choose another name, or remove that one first."


def model_spec_usage(model: ModelSpec) -> tuple[int, int]:
    """(runs, experiments) that use the model."""
    return Run.objects.filter(model=model).count(), Experiment.objects.filter(model=model).count()


@transaction.atomic
def model_spec_remove(*, model: ModelSpec, actor) -> None:
    """Remove a model no run or experiment uses (audited); ModelSpecInUse otherwise."""
    current = ModelSpec.objects.select_for_update().filter(pk=model.pk).first()
    if current is None:
        return  # removed meanwhile
    runs, experiments = model_spec_usage(current)
    if runs or experiments:
        raise ModelSpecInUse(current, runs, experiments)
    audit_log(project=current.project, actor=actor, action="model.remove", target=current,
              data={"name": current.name, "hf_id": current.hf_id, "local_path": current.local_path})
    try:
        with transaction.atomic():
            current.delete()
    except ProtectedError:  # a run started with it in the meantime
        raise ModelSpecInUse(current, *model_spec_usage(current)) from None

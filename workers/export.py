"""Job handler for "export": merge a checkpoint's LoRA adapters into its base model.

The checkpoints page queues it (payload: checkpoint_id, run_id, source, out) and offers the
merged folder as a download once the job succeeded. The output folder is written whole or
not at all (training.export writes a temporary folder and renames it), so an attempt that
finds it complete after a lost lease has nothing left to do.
"""

from __future__ import annotations

from pathlib import Path

from webapp.runs.models import Checkpoint
from webapp.runs.services.paths import (
    checkpoint_folder,
    local_path,
    run_folder,
    strictly_inside,
    weights_problem,
)
from workers.runner import JobContext, handler


class ExportUnavailable(RuntimeError):
    """The checkpoint's folder cannot be read: deleted by retention, or not in its run's folder on this server."""


def _is_complete_export(out: Path) -> bool:
    return (out / "config.json").is_file()


def _output_folder(checkpoint: Checkpoint, location: str) -> Path:
    """Where the merged model goes: the payload's folder, only if it is inside the checkpoint's run folder."""
    path = local_path(location)
    if path is None or not strictly_inside(path, run_folder(checkpoint.run)):
        raise ExportUnavailable(f"the export's output folder {location!r} is not inside the folder of run "
                                f"{checkpoint.run_id} on this server; export the checkpoint again from its page.")
    return path


@handler("export")
def run_export(ctx: JobContext) -> None:
    checkpoint = Checkpoint.objects.select_related("run").get(pk=ctx.payload["checkpoint_id"])
    what = f"checkpoint {checkpoint.pk} ({checkpoint.run.name}, step {checkpoint.step})"
    out = _output_folder(checkpoint, str(ctx.payload.get("out", "")))
    if _is_complete_export(out):
        ctx.log(f"{out} holds a complete export already (an earlier attempt wrote it)")
        ctx.set_progress(1.0)
        return
    # The checkpoint's own folder, by the one rule (webapp.runs.services.paths); never a path from the payload.
    source, state = checkpoint_folder(checkpoint)
    if source is None:
        raise ExportUnavailable(weights_problem(state, what, checkpoint.storage_uri))
    ctx.check()
    ctx.log(f"merging {source} into its base model; writing {out}")
    ctx.set_progress(0.1)
    # Imported here: torch and transformers load only on the hosts that export.
    from training.export import export_checkpoint

    export_checkpoint(source, out)
    ctx.set_progress(1.0)
    ctx.log(f"exported checkpoint {checkpoint.pk} to {out}")

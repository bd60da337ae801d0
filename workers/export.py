"""Job handler for "export": merge a checkpoint's LoRA adapters into its base model.

The checkpoints page queues it (payload: checkpoint_id, run_id, source, out) and offers the
merged folder as a download once the job succeeded. The output folder is written whole or
not at all (training.export writes a temporary folder and renames it), so an attempt that
finds it complete after a lost lease has nothing left to do.
"""

from __future__ import annotations

from pathlib import Path

from webapp.runs.models import Checkpoint
from workers.runner import JobContext, handler


class ExportUnavailable(RuntimeError):
    """The checkpoint's folder cannot be read: deleted by retention, or never on this host."""


def _is_complete_export(out: Path) -> bool:
    return (out / "config.json").is_file()


@handler("export")
def run_export(ctx: JobContext) -> None:
    checkpoint = Checkpoint.objects.select_related("run").get(pk=ctx.payload["checkpoint_id"])
    source = Path(ctx.payload.get("source") or checkpoint.storage_uri)
    out = Path(ctx.payload["out"])
    if _is_complete_export(out):
        ctx.log(f"{out} holds a complete export already (an earlier attempt wrote it)")
        ctx.set_progress(1.0)
        return
    if not source.is_dir():
        raise ExportUnavailable(
            f"the folder of checkpoint {checkpoint.pk} ({checkpoint.run.name}, step {checkpoint.step}) is gone: "
            f"{source}. Training keeps only the best checkpoints of a run (keep_top_k)."
        )
    ctx.check()
    ctx.log(f"merging {source} into its base model; writing {out}")
    ctx.set_progress(0.1)
    # Imported here: torch and transformers load only on the hosts that export.
    from training.export import export_checkpoint

    export_checkpoint(source, out)
    ctx.set_progress(1.0)
    ctx.log(f"exported checkpoint {checkpoint.pk} to {out}")

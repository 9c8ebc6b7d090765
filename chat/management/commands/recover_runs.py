"""manage.py recover_runs: give up on runs whose process died (a server would resume them):
interrupt them and repair their histories."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from chat import runs
from chat.models import HistoryRepair, Run
from chat.runs.tasks import STALE_AFTER


class Command(BaseCommand):
    help = (
        "Mark every run left in progress by a process that stopped (a crash, a restart) as "
        "interrupted, and repair its conversation's history so the next run can continue, "
        "instead of letting a server resume it (a running server claims and resumes such runs "
        "by itself). Runs of live processes are left alone: a process is gone when its pid is "
        "gone on this host, when it let go of the run, or when its lease expired (a row from "
        f"before leases: no sign of life for {int(STALE_AFTER.total_seconds())} seconds)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        recovered = runs.recover_interrupted_runs()
        repairs = HistoryRepair.objects.filter(run__in=[run.pk for run in recovered])
        changes = {repair.run_id: (len(repair.added), len(repair.removed)) for repair in repairs}
        for run in recovered:
            added, removed = changes.get(run.pk, (0, 0))
            self.stdout.write(
                f"run {run.pk} of conversation {run.conversation_id} (worker {run.worker or '?'}): "
                f"interrupted; history repaired: added {added}, removed {removed} message(s)"
            )
        alive = Run.objects.in_progress().count()
        summary = f"Recovered {len(recovered)} run(s)"
        if alive:
            summary += f"; {alive} run(s) in progress in live processes left alone"
        self.stdout.write(self.style.SUCCESS(summary + "."))

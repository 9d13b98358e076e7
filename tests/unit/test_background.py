from __future__ import annotations

from engine import omni
from engine.background import CommandCompletion, format_report, report_message


def test_report_completed() -> None:
    done = CommandCompletion("proc-0a1b2c3d", "make build", "completed", 0, "", "ok\n")
    assert format_report(done) == (
        "[background_task_done]\n"
        "kind: command\n"
        "id: proc-0a1b2c3d\n"
        "status: completed\n"
        "[/background_task_done]\n"
        "\n"
        "Background command proc-0a1b2c3d (make build) finished. Last output:\n"
        "ok\n"
    )


def test_report_failed_with_dropped_output() -> None:
    done = CommandCompletion("proc-0a1b2c3d", "x", "failed", 2, "exit code 2", "y" * 5000)
    report = format_report(done)
    assert report.startswith(
        "[background_task_done]\nkind: command\nid: proc-0a1b2c3d\nstatus: failed\n"
        "detail: exit code 2\n[/background_task_done]\n\n"
        "Background command proc-0a1b2c3d (x) failed (exit code 2). Last output:\n"
        "[earlier output dropped: exceeded 4000 chars]\n"
    )
    assert report.endswith("\n" + "y" * 4000)


def test_report_message_is_user_text() -> None:
    message = report_message(CommandCompletion("p", "c", "completed", 0, "", ""))
    assert isinstance(message.payload, omni.TextPayload) and message.payload.role == "user"
    assert message.payload.text.endswith("It produced no output.")

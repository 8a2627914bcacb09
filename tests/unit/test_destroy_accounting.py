"""Destroy exports the Slurm accounting history from the head before anything is removed: exported, destroy goes on;
failed, destroy stops with nothing removed and names --drop-accounting; with that flag, the export is skipped and
said. The head is a fake standing for the head's golden container reached as root."""

from __future__ import annotations


import pytest
from typer.testing import CliRunner

from goldenenv import automation, jobs, slurm
from goldenenv.clouds.aws import retained
from goldenenv.lifecycle import load_spec
from fake_automation import FakeStack

FS_STACK, ROOT_STACK = "aws-p5-2node", "aws-g5-dev"
FS = "fs-0123456789abcdef0"
DUMP = "/fsx/jobs/.goldenenv/accounting.sql.gz"
"""aws-p5-2node's jobs folder is on FSx at /fsx (its stack file), the dump's place under it is issue 41's."""


class FakeHead:
    """The head's container: answers the export with `answer` (exit code, output), or raises `fails`."""

    def __init__(self, order: list[str], answer: tuple[int, str] = (0, ""), fails: Exception | None = None):
        self.order, self.answer, self.fails, self.argv = order, answer, fails, None

    def run(self, argv):
        self.argv = argv
        self.order.append("accounting")
        if self.fails:
            raise self.fails
        return self.answer


@pytest.fixture
def order(monkeypatch):
    """What destroy did, in order: the accounting export, the file system's export, Pulumi's destroy."""
    done: list[str] = []

    def export(fs_id, region, log, **kw):
        done.append("fs export")
        return retained.ExportResult("task-1", 1, 1, 0, 0.1)

    monkeypatch.setattr(retained, "export_file_system", export)
    return done


def outputs():
    return {"bucket": "b", "fileSystemId": FS, "headPrivateIp": "10.0.1.5"}


def test_the_history_is_exported_first_and_destroy_goes_on(order):
    head, target, lines = FakeHead(order), FakeStack(outputs()), []
    automation.destroy(load_spec(FS_STACK), log=lines.append, target=target, head=lambda o: head)
    assert head.argv == [slurm.ENTRY, "export-accounting", DUMP]
    assert order == ["accounting", "fs export"] and target.calls == ["destroy"]
    assert any(DUMP in line and "exported" in line for line in lines)


@pytest.mark.parametrize("head", [
    lambda order: FakeHead(order, (1, "mysqldump: Got error: 2002: Can't connect to local server")),
    lambda order: FakeHead(order, fails=jobs.HeadError("ssh://ubuntu@10.0.1.5: ssh failed: Connection timed out")),
], ids=["dump-failed", "head-unreachable"])
def test_a_failed_export_stops_destroy_before_anything_is_removed(order, head):
    target = FakeStack(outputs())
    with pytest.raises(automation.LifecycleError) as raised:
        automation.destroy(load_spec(FS_STACK), purge_data=True, log=lambda m: None, target=target,
                           head=lambda o: head(order))
    message = str(raised.value)
    assert "Nothing was destroyed" in message and "--drop-accounting" in message
    assert "2002" in message or "Connection timed out" in message, "the cause is said"
    assert order == ["accounting"] and target.calls == [], "no file system export, no destroy, no purge"


def test_drop_accounting_skips_the_export_and_says_so(order):
    head, target, lines = FakeHead(order), FakeStack(outputs()), []
    automation.destroy(load_spec(FS_STACK), log=lines.append, target=target, head=lambda o: head,
                       drop_accounting=True)
    assert head.argv is None and order == ["fs export"] and target.calls == ["destroy"]
    assert any("--drop-accounting" in line and "not exporting" in line for line in lines)


def test_a_stack_whose_outputs_name_no_head_has_nothing_to_export(order):
    target, lines = FakeStack({"bucket": "b", "fileSystemId": FS}), []
    automation.destroy(load_spec(FS_STACK), log=lines.append, target=target, head=lambda o: None)
    assert order == ["fs export"] and target.calls == ["destroy"]
    assert any("no Slurm head" in line for line in lines)


def test_without_a_shared_file_system_the_head_is_not_asked_and_destroy_says_the_history_goes(order):
    head, target, lines = FakeHead(order), FakeStack({"bucket": "b", "headPrivateIp": "10.0.1.5"}), []
    automation.destroy(load_spec(ROOT_STACK), log=lines.append, target=target, head=lambda o: head)
    assert head.argv is None and target.calls == ["destroy"]
    assert any("root volume" in line for line in lines)


def test_the_cli_reaches_the_heads_container_as_root_at_the_heads_address():
    from goldenenv.cli.stack import _root_head

    reach = _root_head(load_spec(FS_STACK), None, None, None, None)
    head = reach(outputs())
    assert isinstance(head, jobs.SshHead) and head.host == "ssh://ubuntu@10.0.1.5"
    words = head.exec_prefix.split()
    assert words[words.index("--user") + 1] == "root" and words[-1] == "goldenenv"
    assert reach({"bucket": "b"}) is None


def test_destroy_on_the_command_line_stops_naming_the_flag(order, monkeypatch):
    from goldenenv.cli import app

    target = FakeStack(outputs())
    monkeypatch.setattr(automation, "stack", lambda spec: target)
    monkeypatch.setattr(jobs.SshHead, "run", lambda self, argv: (1, "mysqldump: Access denied for user 'root'"))
    result = CliRunner().invoke(app, ["destroy", "-s", FS_STACK])
    assert result.exit_code == 1, result.output
    assert "--drop-accounting" in result.output and target.calls == []

    skipped = FakeStack(outputs())
    monkeypatch.setattr(automation, "stack", lambda spec: skipped)
    result = CliRunner().invoke(app, ["destroy", "-s", FS_STACK, "--drop-accounting"])
    assert result.exit_code == 0, result.output
    assert skipped.calls == ["destroy"] and "--drop-accounting" in result.output

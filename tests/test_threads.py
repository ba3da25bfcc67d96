"""torch's thread count (eaglekit/target/threads.py): chosen from the free cores unless set, applied while a command
runs and given back after it, and said in --help and the report. What each setting costs in time is measured in
benchmarks/threads_bench.py, not here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from eaglekit.errors import UsageError
from eaglekit.target import threads


@pytest.mark.parametrize(
    "cores, busy, expected",
    [
        (2, 0.0, 2),  # alone
        (2, 0.4, 2),  # the second core more than half free
        (2, 0.6, 1),  # less than half of it free: one thread waits on no one
        (2, 1.0, 1),  # one other process spinning
        (2, 5.0, 1),  # more work than cores: still one
        (4, 1.2, 3),
        (4, 1.6, 2),
        (1, 0.0, 1),
    ],
)
def test_a_core_counts_when_at_least_half_of_it_is_free(cores, busy, expected):
    assert threads.free_threads(cores, busy) == expected


def test_busy_time_is_read_for_the_allowed_cpus_alone(tmp_path):
    stat = tmp_path / "stat"
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal: busy = all but idle and iowait
    stat.write_text(
        "cpu  900 0 90 9000 90 0 0 0 0 0\n"
        "cpu0 100 1 10 1000 50 2 3 4 0 0\n"
        "cpu1 800 0 80 8000 40 0 0 0 0 0\n"
        "cpu10 7 0 0 0 0 0 0 0 0 0\n"
        "intr 1 2 3\n"
    )
    assert threads.busy_seconds([0], str(stat)) == pytest.approx((100 + 1 + 10 + 2 + 3 + 4) / hz)
    assert threads.busy_seconds([0, 1], str(stat)) == pytest.approx((120 + 880) / hz)
    assert threads.busy_seconds([0], str(tmp_path / "missing")) is None


def test_a_cgroup_quota_is_read_in_cores(tmp_path):
    limit = tmp_path / "cpu.max"
    limit.write_text("150000 100000\n")
    assert threads.quota_cores(str(limit)) == 1.5
    limit.write_text("max 100000\n")
    assert threads.quota_cores(str(limit)) is None
    assert threads.quota_cores(str(tmp_path / "missing")) is None


class FakeProbe(threads.Probe):
    """A probe whose window saw ``others`` cores busy with other processes' work."""

    def __init__(self, cpus, others):
        self.cpus, self._others = cpus, others

    def others(self):
        return self._others


def test_the_load_other_processes_put_on_the_cores_is_this_process_s_own_time_taken_out(monkeypatch):
    clock = iter([(10.0, 1.0, 100.0), (12.0, 3.0, 104.0)])  # 2 s: the cores busy 4 s, 2 of them this process's
    monkeypatch.setattr(threads.Probe, "_now", lambda self: next(clock))
    probe = threads.Probe([0, 1])
    assert probe.others() == pytest.approx(1.0)
    clock = iter([(10.0, 1.0, None)])
    assert threads.Probe([0, 1]).others() is None  # no /proc/stat: nothing measured


def test_what_sets_the_count_and_in_which_order(monkeypatch):
    monkeypatch.setattr(threads, "quota_cores", lambda: None)
    busy = FakeProbe([0, 1], 1.0)
    assert threads.decide(3, busy, 2, environ={threads.ENV: "4"}).to_dict() == {"threads": 3, "chosen_by": "asked"}
    assert threads.decide(None, busy, 2, environ={threads.ENV: "4"}).threads == 4
    # an OMP_NUM_THREADS the user set is torch's to read: the count torch took from it stays
    assert threads.decide(None, busy, 2, environ={"OMP_NUM_THREADS": "2"}).to_dict() == {
        "threads": 2,
        "chosen_by": "OMP_NUM_THREADS",
    }
    assert threads.decide(None, busy, 2, environ={}).to_dict() == {
        "threads": 1,
        "chosen_by": "measured load",
        "cores": 2,
        "others_busy_cores": 1.0,
    }
    assert threads.decide(None, FakeProbe([0, 1], 0.1), 2, environ={}).threads == 2
    assert threads.decide(None, FakeProbe([0, 1, 2, 3], 0.0), 2, environ={}).threads == 2  # never past torch's own
    assert threads.decide(None, FakeProbe([0, 1], None), 2, environ={}).by == "torch's default"
    monkeypatch.setattr(threads, "quota_cores", lambda: 1.0)  # a container given one CPU of the host's two
    assert threads.decide(None, FakeProbe([0, 1], 0.0), 2, environ={}).threads == 1


def test_a_count_that_is_not_one_is_refused_by_name(monkeypatch):
    with pytest.raises(UsageError, match="threads 0"):
        with threads.chosen(0):
            pass
    monkeypatch.setenv(threads.ENV, "many")
    with pytest.raises(UsageError, match=f"{threads.ENV} 'many'"):
        with threads.chosen():
            pass


def test_the_count_holds_while_the_command_runs_and_torch_s_comes_back(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    before = torch.get_num_threads()
    assert threads.settle() is None  # outside a command: torch's count is left alone
    with threads.chosen(1):
        assert torch.get_num_threads() == before  # nothing applied before torch's work begins
        assert threads.settle().threads == 1 == torch.get_num_threads()
        assert threads.settle().threads == 1  # once
    assert torch.get_num_threads() == before


def test_help_says_how_the_count_is_chosen(cli):
    for command in ("verify", "drift", "convert"):
        said = " ".join(cli(command, "--help").stdout.split())
        assert "--threads N" in said and threads.ENV in said and "half free" in said, command
    for command in ("verify", "drift"):
        assert "--batch-size N" in " ".join(cli(command, "--help").stdout.split())


def test_a_bad_count_on_the_command_line_is_a_usage_error(cli, tmp_path):
    result = cli("verify", str(tmp_path), "--target", str(tmp_path), "--threads", "0", expect=2)
    assert "--threads" in result.stderr


def test_the_report_says_the_threads_and_batch_a_run_used(trained_pair, cli):
    """--threads and --batch-size reach the run, and the report's resources say what it used (the schema holds them)."""
    import json

    from eaglekit import schemas

    pair = trained_pair(eagle="3")
    args = ("verify", pair["drafter"], "--target", pair["target"], "--prompts", pair["prompts"], "--max-new-tokens", 8)
    report = json.loads(cli(*args, "--threads", 1, "--batch-size", 2, "--json").stdout)
    assert report["resources"] == {
        "threads": 1,
        "chosen_by": "asked",
        "batch_size": 2,
        "decode_groups": 3,
        "prefilled_row_by_row": 0,  # prompts of like length: each group prefills them padded, in one forward
    }
    assert schemas.check(report, "verify.schema.json") == []
    said = json.loads(cli(*args, "--json").stdout)["resources"]  # the environment's count (tests/conftest.py)
    assert said["chosen_by"] == threads.ENV and said["threads"] == int(os.environ[threads.ENV])
    assert said["batch_size"] >= 1 and said["decode_groups"] >= 1
    assert torch.get_num_threads() == int(os.environ[threads.ENV])  # given back after the run


def test_the_report_says_which_groups_prefilled_row_by_row(trained_pair, cli, tmp_path, monkeypatch):
    """Prompts of unlike lengths (their padding wide) prefill one at a time: the report's ``prefilled_row_by_row``
    counts the groups that did, as the decode did them."""
    import json

    from eaglekit.target import decode

    pair = trained_pair(eagle="3")
    base = [json.loads(line)["input_ids"] for line in Path(pair["prompts"]).read_text().splitlines()][:4]
    lengths = (300, 200, 150, 100)
    records = [{"input_ids": (p * 100)[:n]} for p, n in zip(base, lengths)]
    prompts = tmp_path / "unlike.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in records))
    alone = []
    real = decode._prefill_rows
    monkeypatch.setattr(decode, "_prefill_rows", lambda *a, **k: (alone.append(len(a[2])), real(*a, **k))[1])
    args = ("verify", pair["drafter"], "--target", pair["target"], "--prompts", prompts, "--max-new-tokens", 8)
    # four at most: 300, 200 and 150 together (250 padded positions: row by row), 100 alone (its padding would pass half
    # the group's real positions); two at most: 300 and 200 row by row (100 padded), 150 and 100 padded (50)
    for batch, expected in ((4, [3]), (2, [2])):
        alone.clear()
        report = json.loads(cli(*args, "--batch-size", batch, "--json").stdout)
        assert alone == expected
        assert report["resources"]["prefilled_row_by_row"] == len(alone)

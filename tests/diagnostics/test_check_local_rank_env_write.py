"""Writing ``LOCAL_RANK`` into the environment is not reading it from the launcher. gmflow-like: the script parses
``--local_rank`` (torch.distributed.launch passes it) and hands it on with ``os.environ['LOCAL_RANK'] =
str(args.local_rank)``; under torchrun the flag keeps its default in every process, so the finding stands."""

from __future__ import annotations

from tests.diagnostics.test_check_project_imports import project, rules, script_text

BODY = """\
    import argparse
    import os

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    {hand_on}
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group("nccl")
    """


def test_a_local_rank_flag_written_into_the_environment_is_still_the_flag(tmp_path):
    written = project(tmp_path / "written", {
        "main.py": script_text(BODY.format(hand_on="os.environ['LOCAL_RANK'] = str(args.local_rank)")),
    })
    assert [rule for _, rule in rules(written)] == ["local-rank-argument"]
    read = project(tmp_path / "read", {
        "main.py": script_text(BODY.format(hand_on="args.local_rank = int(os.environ['LOCAL_RANK'])")),
    })
    assert "local-rank-argument" not in [rule for _, rule in rules(read)]


def test_a_flag_only_mirrored_into_the_environment_for_the_old_launcher_is_not_reported(tmp_path):
    """mmdetection's tools: ``if 'LOCAL_RANK' not in os.environ: os.environ['LOCAL_RANK'] = str(args.local_rank)``
    and nothing else reads the flag (the framework's ``init_dist`` reads the environment): under torchrun the
    environment already holds each process's value."""
    mirrored = project(tmp_path, {
        "train.py": script_text(BODY.format(hand_on="if 'LOCAL_RANK' not in os.environ:\n"
                                                    "        os.environ['LOCAL_RANK'] = str(args.local_rank)")
                                .replace("torch.cuda.set_device(args.local_rank)", "init_dist('pytorch')")),
    })
    assert "local-rank-argument" not in [rule for _, rule in rules(mirrored)]

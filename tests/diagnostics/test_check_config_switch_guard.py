"""A config key spelled in capitals is the same distributed switch: ``not cfg.MULTIPROCESSING_DISTRIBUTED or
(cfg.MULTIPROCESSING_DISTRIBUTED and args.rank == 0)`` (HigherHRNet's YACS config; pytorch/examples writes it
``args.multiprocessing_distributed``) holds in a one-process run or on rank 0: a save under it runs once."""

from __future__ import annotations

from tests.diagnostics.test_check_project_imports import project, rules, script_text


def test_an_upper_case_config_switch_beside_a_rank_test_in_an_or_is_a_rank_0_guard(tmp_path):
    def saves(guard: str) -> list[str]:
        script = project(tmp_path / str(len(list(tmp_path.iterdir()))), {
            "dist_train.py": script_text(f"""\
                import torch.multiprocessing as mp

                def main_worker(gpu, args, cfg):
                    dist.init_process_group("nccl", rank=args.rank)
                    model = torch.nn.Linear(2, 2)
                    if {guard}:
                        torch.save(model.state_dict(), "final_state.pth")

                def main(args, cfg):
                    mp.spawn(main_worker, nprocs=2, args=(args, cfg))
                """),
        })
        return [rule for _, rule in rules(script)]

    assert saves("not cfg.MULTIPROCESSING_DISTRIBUTED or (cfg.MULTIPROCESSING_DISTRIBUTED and args.rank == 0)") == []
    assert saves("not cfg.DISTRIBUTED or args.rank == 0") == []
    assert saves("not cfg.VERBOSE or args.rank == 0") == ["save-on-every-rank"]  # not a switch of the processes

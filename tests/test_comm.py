"""Collective helpers: single-process defaults, and real 2/3-process results over gloo."""

import torch

import paratrain as pt
from tests.comm_workers import collectives, late_rank


def test_single_process_defaults():
    assert (pt.rank(), pt.world_size(), pt.is_main()) == (0, 1, True)
    assert pt.all_reduce(3.5) == 3.5
    t = torch.arange(3)
    assert pt.all_reduce(t, op="sum").tolist() == [0, 1, 2]
    assert pt.all_gather(t)[0] is t
    assert pt.broadcast_object({"a": 1}) == {"a": 1}
    assert pt.gather_object(7) == [7] and pt.all_gather_object(7) == [7]
    pt.barrier(timeout=1)
    with pt.main_first():
        pass


def test_unknown_op_is_refused():
    import pytest

    with pytest.raises(pt.ConfigError, match="not one of"):
        pt.all_reduce(1.0, op="avg")


def test_collectives_on_three_ranks():
    out = pt.spawn(collectives, 3)
    assert out["sum"] == 6
    assert out["mean"] == 1.0
    assert out["max"] == [2, 0] and out["min"] == [0, -2]
    assert out["int_mean"] == 3.0
    assert out["broadcast"] == {"from": 0}
    assert out["gather"] == ["r0", "r1", "r2"]
    assert out["all_gather_object"] == [0, 10, 20]
    assert out["all_gather"] == [[[0.0, 0.0]], [[1.0, 1.0]] * 2, [[2.0, 2.0]] * 3]
    assert out["scalar_gather"] == [[0.0], [1.0], [2.0]]
    # main_first: rank 0 ran its body before every other rank started theirs
    assert out["main_first_t"] == min(out["all_first_t"])


def test_barrier_timeout_names_the_late_rank():
    out = pt.spawn(late_rank, 2)
    assert out["late"] == [1], out
    assert "rank(s) 1 did not arrive within 2s" in out["message"]
    assert "epoch-end barrier" in out["message"]


def test_without_a_group_the_helpers_read_the_launchers_environment(monkeypatch, capsys):
    """Before a group exists or after it is closed: SLURM, OpenMPI and torchrun variables decide."""
    import logging

    launchers = [
        {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_NODELIST": "node1"},
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
         "OMPI_COMM_WORLD_LOCAL_SIZE": "3"},
        {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x",
         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
    ]
    for variables in launchers:
        with monkeypatch.context() as patch:
            for key, value in variables.items():
                patch.setenv(key, value)
            assert pt.rank() == 1 and not pt.is_main() and pt.world_size() in (2, 3)
            pt.print("from rank 1")
            logger = pt.get_logger("paratrain.test_comm")
            records = []
            handler = logging.Handler()
            handler.emit = records.append
            logger.addHandler(handler)
            logger.info("info from rank 1")
            logger.warning("warning from rank 1")
            logger.removeHandler(handler)
            assert [r.getMessage() for r in records] == ["warning from rank 1"]
    assert capsys.readouterr().out == ""
    assert (pt.rank(), pt.world_size(), pt.is_main()) == (0, 1, True)


PRINT_AFTER_FIT = """
import torch
import paratrain as pt

pt.print("before any group")
x = torch.randn(64, 4)
data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())
pt.fit(torch.nn.Linear(4, 2), data, data, epochs=1, batch_size=8, progress=False, log_every=1000)
pt.print("after fit closed its group")
pt.get_logger("script").info("logged after fit")
print(f"rank {pt.rank()} of {pt.world_size()} main {pt.is_main()}", flush=True)
"""


def test_print_after_fit_prints_once_on_three_processes(tmp_path):
    import subprocess

    from tests.support import clean_env, paratrain_cmd

    (tmp_path / "script.py").write_text(PRINT_AFTER_FIT)
    done = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "3", str(tmp_path / "script.py")),
                          env=clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert output.count("before any group") == 1
    assert output.count("after fit closed its group") == 1
    assert output.count("logged after fit") == 1
    for rank in range(3):
        assert f"rank {rank} of 3 main {rank == 0}" in output


def test_lines_the_launcher_tags_already_carry_no_second_rank_tag(monkeypatch, capsys):
    from paratrain import comm

    from paratrain.env.torchelastic import LINE_PREFIX_VAR

    monkeypatch.setenv(LINE_PREFIX_VAR, "[rank${rank}]:")
    comm.print("every rank", all_ranks=True)
    assert capsys.readouterr().out == "every rank\n"
    assert "rank %(rank)s" not in comm._log_format()
    monkeypatch.delenv(LINE_PREFIX_VAR)
    comm.print("every rank", all_ranks=True)
    assert capsys.readouterr().out == "[rank 0] every rank\n"
    assert "rank %(rank)s" in comm._log_format()


def test_before_leaving_calls_what_is_alive_once_and_skips_what_is_gone():
    import gc
    import weakref

    from paratrain import comm

    class Writer:
        def __init__(self):
            self.finished = 0

        def finish(self):
            self.finished += 1

    alive, gone = Writer(), Writer()
    comm.before_leaving(weakref.WeakMethod(alive.finish))
    comm.before_leaving(weakref.WeakMethod(gone.finish))
    del gone
    gc.collect()
    comm.leaving()
    comm.leaving()  # once: the callbacks are dropped when they run
    assert alive.finished == 1

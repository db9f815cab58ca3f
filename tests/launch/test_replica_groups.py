"""``paratrain run --fault-tolerance replicas`` on several nodes, before any group starts. (Its processes — a group
killed and started again, the Lighthouse lost and everything resumed from disk — are tested with the strategy they
serve, in one job: tests/strategy/test_ft_ddp.py.)"""

from __future__ import annotations


def test_several_nodes_node_0_away_from_the_master_address_and_a_node_without_lighthouse_say_so_in_one_line(tmp_path):
    """Node 0 hosts the Lighthouse at --master-addr: on a machine without that address it refuses at once; another
    node waits for the Lighthouse within --rdzv-timeout and then names its address. Nothing runs the script."""
    import subprocess

    from tests.support import clean_env, free_port, paratrain_cmd

    script = tmp_path / "train.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    port = str(free_port())
    common = ["run", "--fault-tolerance", "replicas", "--replica-groups", "1", "--nnodes", "2", "--master-port", port]
    away = subprocess.run(paratrain_cmd(*common, "--node-rank", "0", "--master-addr", "192.0.2.1", str(script)),
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    waiting = subprocess.run(paratrain_cmd(*common, "--node-rank", "1", "--master-addr", "127.0.0.1", "--rdzv-timeout",
                                           "1", str(script)), env=clean_env(), capture_output=True, text=True, timeout=120)
    assert away.returncode != 0 and waiting.returncode != 0
    away_lines, waiting_lines = away.stderr.strip().splitlines(), waiting.stderr.strip().splitlines()
    assert len(away_lines) == 1 and "--node-rank 0 must run on the machine at 192.0.2.1" in away_lines[0], away.stderr
    assert len(waiting_lines) == 1, waiting.stderr
    assert f"the Lighthouse at 127.0.0.1:{port} (node 0) did not answer within 1s" in waiting_lines[0], waiting.stderr
    assert not (tmp_path / "train.py.ran").exists()


def test_a_sharded_strategy_in_a_replica_group_is_refused_in_one_line_and_the_group_is_not_started_again(tmp_path):
    """``strategy="fsdp"`` in a replica group would train each group alone: every worker refuses it in one line
    naming what works (a ConfigError, exit code 2), and the launcher does not start the group again (the same start
    fails the same way) but exits 2 itself."""
    import subprocess

    from tests.support import clean_env, paratrain_cmd

    script = tmp_path / "train.py"
    script.write_text("import paratrain as pt\npt.Runtime(strategy='fsdp')\nopen(__file__ + '.ran', 'w').close()\n")
    done = subprocess.run(paratrain_cmd("run", "--fault-tolerance", "replicas", "--replica-groups", "1",
                                        "--nproc-per-node", "2", str(script)),
                          env=clean_env(), capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    refusal = "strategy 'fsdp' runs here in a replica group (TORCHFT_LIGHTHOUSE and REPLICA_GROUP_ID are set"
    assert refusal in said and "use strategy='ft-fsdp' to shard the model over each group's processes" in said, \
        said[-3000:]
    assert said.count("replica group 0 exited with code 2, a configuration error") == 1, said[-3000:]
    assert "starting it again (" not in said and not (tmp_path / "train.py.ran").exists(), said[-3000:]


def test_a_lighthouse_timeout_variable_that_is_not_milliseconds_is_refused_in_one_line_before_anything_starts(tmp_path):
    """``PARATRAIN_FT_HEARTBEAT_TIMEOUT_MS`` / ``PARATRAIN_FT_JOIN_TIMEOUT_MS`` set the Lighthouse's clock: a word, a
    fraction, or a heartbeat timeout under two heartbeats (a live group dropped between its own heartbeats) is refused
    in one line naming the variable and a value to write; no Lighthouse, no group, no script."""
    import subprocess

    from tests.support import clean_env, paratrain_cmd

    script = tmp_path / "train.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    for name, value in [("PARATRAIN_FT_HEARTBEAT_TIMEOUT_MS", "1s"), ("PARATRAIN_FT_HEARTBEAT_TIMEOUT_MS", "150"),
                        ("PARATRAIN_FT_JOIN_TIMEOUT_MS", "0.5")]:
        done = subprocess.run(paratrain_cmd("run", "--fault-tolerance", "replicas", "--replica-groups", "2", str(script)),
                              env={**clean_env(), name: value}, capture_output=True, text=True, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1, done.stderr
        assert f"{name}='{value}' must be a whole number of milliseconds of at least" in lines[0], lines
        assert f"write e.g. {name}=" in lines[0], lines
        assert "replica group" not in done.stdout + done.stderr
    assert not (tmp_path / "train.py.ran").exists()
    from paratrain.replica_environ import liveness_ms

    assert liveness_ms({}) == (1000, 2000)
    assert liveness_ms({"PARATRAIN_FT_HEARTBEAT_TIMEOUT_MS": " 3000 ", "PARATRAIN_FT_JOIN_TIMEOUT_MS": "500"}) == (3000, 500)

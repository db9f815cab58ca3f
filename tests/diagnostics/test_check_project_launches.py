"""A script that its own project starts with a multi-process launcher is multi-process.

Baichuan2-like: an HF Trainer fine-tuning script has no rank marker in its code; the README starts it with
``deepspeed`` (or ``torchrun --nproc_per_node 8``), so its unguarded prints run once per rank. A launch of one
process, or a command naming another file of the same name, tells nothing about this one.
"""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from paratrain.diagnostics.project_launches import multi_process_launch

SCRIPT = """\
from transformers import Trainer, TrainingArguments


def train():
    args = TrainingArguments(output_dir="out")
    print("trainable parameters: 7B")
    Trainer(args=args).train()


if __name__ == "__main__":
    train()
"""


def _project(root: Path, script: str, command_file: str, command: str) -> Path:
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    path = root / script
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCRIPT)
    commands = root / command_file
    commands.parent.mkdir(parents=True, exist_ok=True)
    commands.write_text(command)
    return path


def _prints(path: Path) -> list[int]:
    return [f.line for f in check_file(path) if f.rule == "print-on-every-rank"]


README = """\
# Fine-tuning

```shell
torchrun --nproc_per_node {count} finetune.py \\
    --model_name_or_path base \\
    --output_dir out
```
"""


def test_a_readme_torchrun_of_eight_makes_the_script_multi_process(tmp_path):
    path = _project(tmp_path, "finetune.py", "README.md", README.format(count=8))
    assert _prints(path) == [6]
    launch = multi_process_launch(path)
    assert launch is not None and (launch.where, launch.launcher) == ("README.md:4", "torchrun")


def test_a_launch_of_one_process_tells_nothing(tmp_path):
    path = _project(tmp_path, "finetune.py", "README.md", README.format(count=1).replace("node 1", "node=1"))
    assert _prints(path) == []
    readme = tmp_path / "README.md"
    for one in ("torchrun --nproc-per-node 1 finetune.py", "deepspeed --num_gpus=1 finetune.py",
                "deepspeed --include localhost:0 finetune.py", "CUDA_VISIBLE_DEVICES=0 deepspeed finetune.py",
                "torchrun finetune.py", "python -m torch.distributed.launch --nproc_per_node 1 --use_env finetune.py"):
        readme.write_text(f"```\n{one}\n```\n")
        assert multi_process_launch(path) is None, one
    # a count the launcher reads from a variable is several
    readme.write_text("python -u -m torch.distributed.launch --nproc_per_node=$GPUS --use_env finetune.py\n")
    assert _prints(path) == [6]


def test_a_deepspeed_shell_script_naming_the_path_from_the_root(tmp_path):
    path = _project(tmp_path, "train/sft.py", "scripts/run.sh",
                    "#!/bin/bash\n# torchrun --nproc_per_node=1 train/sft.py\ndeepspeed --num_gpus 4 train/sft.py --deepspeed ds.json\n")
    assert _prints(path) == [6]
    assert multi_process_launch(path).where == "scripts/run.sh:3"


def test_a_command_naming_another_file_of_the_same_name_tells_nothing_of_this_one(tmp_path):
    path = _project(tmp_path, "a/train.py", "scripts/run.sh", "torchrun --nproc_per_node=8 b/train.py\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "train.py").write_text(SCRIPT)
    assert _prints(path) == []
    assert _prints(tmp_path / "b" / "train.py") == [6]
    # a path ending in this script's name but leading to the other one names the other one
    path = _project(tmp_path, "train.py", "scripts/run.sh", "torchrun --nproc_per_node=8 b/train.py\n")
    assert _prints(path) == []
    # the bare name, from a file beside none of the three scripts that changes directory first, is ambiguous: silence
    (tmp_path / "scripts" / "run.sh").write_text("cd $1\ndeepspeed train.py\n")
    assert _prints(path) == []


def test_a_bare_name_in_a_shell_script_just_below_the_root_that_stays_there_is_the_roots_script(tmp_path):
    # ULIP: scripts/pretrain_pointbert.sh runs `python -m torch.distributed.launch --nproc_per_node=8 main.py`, run
    # as `bash scripts/pretrain_pointbert.sh` from the root; the project has other main.py files further down
    path = _project(tmp_path, "main.py", "scripts/pretrain.sh",
                    "python -m torch.distributed.launch --nproc_per_node=8 main.py --model big\n")
    (tmp_path / "models" / "examples").mkdir(parents=True)
    (tmp_path / "models" / "examples" / "main.py").write_text(SCRIPT)
    assert multi_process_launch(path).where == "scripts/pretrain.sh:1"
    assert _prints(tmp_path / "models" / "examples" / "main.py") == []
    (tmp_path / "scripts" / "pretrain.sh").write_text(  # it runs another folder's main.py: nothing of the root's
        "cd models/examples\npython -m torch.distributed.launch --nproc_per_node=8 main.py\n")
    assert multi_process_launch(path) is None
    (tmp_path / "scripts" / "pretrain.sh").write_text("torchrun --nproc_per_node=8 main.py\n")
    (tmp_path / "scripts" / "main.py").write_text(SCRIPT)  # the folder's own main.py is the one it runs
    assert multi_process_launch(path) is None


def test_a_bare_name_in_a_command_file_under_the_scripts_own_folder_names_it(tmp_path):
    # LLaMA-Adapter: gorilla/finetune/scripts/finetune/x.sh runs `main_finetune.py` from gorilla/finetune, while
    # another subproject has a main_finetune.py of its own
    path = _project(tmp_path, "gorilla/finetune/main_finetune.py", "gorilla/finetune/scripts/finetune/run.sh",
                    "torchrun --nproc_per_node=8 main_finetune.py\n")
    (tmp_path / "llama_adapter").mkdir()
    (tmp_path / "llama_adapter" / "main_finetune.py").write_text(SCRIPT)
    assert _prints(path) == [6]
    assert multi_process_launch(path).where == "gorilla/finetune/scripts/finetune/run.sh:1"
    assert _prints(tmp_path / "llama_adapter" / "main_finetune.py") == []
    # a file of that name nearer to the command file is the one it runs
    (tmp_path / "gorilla" / "finetune" / "scripts" / "main_finetune.py").write_text(SCRIPT)
    assert _prints(path) == []


def test_without_a_project_root_only_the_scripts_own_directory_is_read(tmp_path):
    script = tmp_path / "job" / "train.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    (tmp_path / "README.md").write_text("torchrun --nproc_per_node=8 job/train.py\n")
    assert multi_process_launch(script) is None
    (script.parent / "run.sh").write_text("torchrun --nproc_per_node=8 train.py\n")
    assert multi_process_launch(script).where == "run.sh:1"


def test_a_fifo_or_a_huge_file_among_the_command_files_is_skipped_not_waited_on(tmp_path):
    import os

    path = _project(tmp_path, "finetune.py", "README.md", "# Fine-tuning\n")
    (tmp_path / "a_train.sh").write_text("torchrun --nproc_per_node 8 finetune.py\n" + "#" * 300_000)  # too big
    os.mkfifo(tmp_path / "b_run.sh")  # read before c_launch.sh; nothing ever writes to it
    (tmp_path / "c_launch.sh").write_text("torchrun --nproc_per_node 8 finetune.py\n")
    launch = multi_process_launch(path)
    assert launch is not None and launch.where == "c_launch.sh:1"


def test_accelerate_launch_starts_several_unless_told_one(tmp_path):
    path = _project(tmp_path, "finetune.py", "README.md", "accelerate launch ./finetune.py --model_name base\n")
    launch = multi_process_launch(path)
    assert launch is not None and (launch.where, launch.launcher) == ("README.md:1", "accelerate launch")
    assert _prints(path) == [6]
    readme = tmp_path / "README.md"
    readme.write_text("accelerate launch --multi_gpu --num_processes=4 --mixed_precision bf16 finetune.py\n")
    assert multi_process_launch(path) is not None
    for one in ("accelerate launch --num_processes 1 finetune.py", "accelerate launch --cpu finetune.py",
                "pip install accelerate && python finetune.py"):
        readme.write_text(f"{one}\n")
        assert multi_process_launch(path) is None, one


def test_options_in_a_variable_and_a_script_named_by_a_variable_of_the_same_file(tmp_path):
    # mt-dnn: `python -m torch.distributed.launch $DISTRIBUTED_ARGS train.py`: a count it cannot read is several
    run = "DISTRIBUTED_ARGS=\"--nproc_per_node $GPUS\"\npython -m torch.distributed.launch $DISTRIBUTED_ARGS finetune.py --lr 1\n"
    path = _project(tmp_path, "finetune.py", "run.sh", run)
    launch = multi_process_launch(path)
    assert launch is not None and launch.where == "run.sh:2"
    assert _prints(path) == [6]
    # UniMatch: `method='finetune'` then `torchrun --nproc_per_node=$1 $method.py`
    (tmp_path / "run.sh").write_text("method='finetune'\n\ntorchrun --nproc_per_node=$1 \\\n    ${method}.py --config c\n")
    assert multi_process_launch(path).where == "run.sh:3"
    # a variable the file never sets names no script
    (tmp_path / "run.sh").write_text("torchrun --nproc_per_node=8 $method.py\n")
    assert multi_process_launch(path) is None


def test_the_flag_of_an_argument_module_a_launched_script_imports_is_the_old_launchers(tmp_path):
    # P5: src/param.py defines --local_rank; src/pretrain.py (`from param import parse_args`) is started by
    # scripts/*.sh with python -m torch.distributed.launch
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "param.py").write_text(
        "import argparse\n\n\ndef parse_args():\n    parser = argparse.ArgumentParser()\n"
        "    parser.add_argument('--local_rank', type=int, default=-1)\n    return parser.parse_args()\n")
    (tmp_path / "src" / "pretrain.py").write_text("from param import parse_args\n\nargs = parse_args()\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "run.sh").write_text(
        "python -m torch.distributed.launch --nproc_per_node=$1 src/pretrain.py --epochs 10\n")
    found = [f for f in check_file(tmp_path / "src" / "param.py") if f.rule == "deprecated-launcher"]
    assert [(f.line, "pretrain.py, which imports this module" in f.problem) for f in found] == [(6, True)]
    (tmp_path / "scripts" / "run.sh").write_text("torchrun --nproc_per_node=$1 src/pretrain.py --epochs 10\n")
    assert [f for f in check_file(tmp_path / "src" / "param.py") if f.rule == "deprecated-launcher"] == []

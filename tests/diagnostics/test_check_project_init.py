"""A function of the script's own project named like a launcher's set-up (``init``, ``initialize``) does not make
the script multi-process: it is judged by what it does. RepDistiller-like: ``from helper.pretrain import init``, a
distillation warm-up, in a one-process script whose prints and saves then run once."""

from __future__ import annotations

from tests.diagnostics.test_check_project_imports import project, rules, script_text

PRETRAIN = """\
    import torch

    def init(model_s, model_t, loader, opt):
        for batch in loader:
            loss = (model_s(batch) - model_t(batch)).pow(2).mean()
            loss.backward()
        return model_s
    """


def test_a_project_function_named_init_is_not_a_process_group(tmp_path):
    script = project(tmp_path, {
        "train_student.py": script_text("""\
            from helper.pretrain import init

            def main():
                model = torch.nn.Linear(2, 2)
                init(model, model, [torch.ones(2)], None)
                print("distilled")
                torch.save(model.state_dict(), "student.pth")

            if __name__ == "__main__":
                main()
            """),
        "helper/__init__.py": "",
        "helper/pretrain.py": PRETRAIN,
    })
    assert rules(script) == []


def test_a_project_init_that_makes_the_process_group_and_a_library_init_still_count(tmp_path):
    joins = PRETRAIN.replace("    for batch", "    torch.distributed.init_process_group('nccl')\n    for batch")
    script = project(tmp_path / "project", {
        "train_student.py": script_text("""\
            from helper.pretrain import init

            model = torch.nn.Linear(2, 2)
            init(model, model, [torch.ones(2)], None)
            print("distilled")
            """),
        "helper/__init__.py": "",
        "helper/pretrain.py": joins,
    })
    assert [rule for _, rule in rules(script)] == ["print-on-every-rank"]
    horovod = project(tmp_path / "horovod", {
        "train.py": script_text("""\
            import horovod.torch as hvd

            hvd.init()
            print("started")
            """),
    })
    assert [rule for _, rule in rules(horovod)] == ["print-on-every-rank"]

"""A SyncBatchNorm conversion behind a switch that is off unless passed is no conversion in a default run.

``if opt.batchnorm_sync: model = SyncBatchNorm.convert_sync_batchnorm(model)`` with ``--batchnorm_sync`` an
``action="store_true"`` option (in the script or in the project's options file) leaves the BatchNorm layers
as they are unless the flag is given; an option's help text naming SyncBatchNorm converts nothing either.
"""

from __future__ import annotations

import textwrap

from paratrain.diagnostics.check import check_file, check_source
from tests.diagnostics.test_check_project_imports import project, script_text

SCRIPT = """\
import argparse
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--sync_bn", {option})
args = parser.parse_args()
dist.init_process_group("nccl")
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
if {test}:
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
model = torch.nn.parallel.DistributedDataParallel(model)
"""


def _norms(option: str, test: str = "args.sync_bn") -> list[int]:
    source = SCRIPT.format(option=option, test=test)
    return [f.line for f in check_source(source) if f.rule == "batchnorm-without-syncbn"]


def test_a_conversion_behind_a_switch_off_by_default_is_reported():
    assert _norms('action="store_true"') == [9]
    assert _norms("type=bool, default=False") == [9]


def test_a_conversion_on_by_default_or_not_behind_the_switch_alone_keeps_it_quiet():
    assert _norms('action="store_true", default=True') == []
    assert _norms("type=bool, default=True") == []
    assert _norms('action="store_true"', test="not args.sync_bn") == []
    assert _norms('action="store_true"', test="args.sync_bn or args.distributed") == []
    assert _norms('action="store_true"', test="True") == []


OPTS = """\
    import argparse

    def parse_opts():
        parser = argparse.ArgumentParser()
        parser.add_argument("--batchnorm_sync", action="store_true",
                            help="If true, SyncBatchNorm is used instead of BatchNorm.")
        return parser.parse_args()
    """
MODEL = """\
    import torch

    def generate_model(opt):
        return torch.nn.Sequential(torch.nn.Conv3d(3, 8, 3), torch.nn.BatchNorm3d(8))
    """


def _project_norms(tmp_path, opts: str) -> list[int]:
    script = project(tmp_path, {
        "main.py": script_text("""\
            from opts import parse_opts
            from model import generate_model
            opt = parse_opts()
            dist.init_process_group("nccl")
            model = generate_model(opt)
            if opt.batchnorm_sync:
                model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
            model = torch.nn.parallel.DistributedDataParallel(model)
            """),
        "opts.py": opts,
        "model.py": MODEL,
    })
    return [f.line for f in check_file(script) if f.rule == "batchnorm-without-syncbn"]


def test_a_switch_of_the_projects_options_file_off_by_default_is_no_conversion(tmp_path):
    assert _project_norms(tmp_path / "off", OPTS) == [7]
    on = OPTS.replace('action="store_true",', 'action="store_true", default=True,')
    assert _project_norms(tmp_path / "on", on) == []


def test_a_help_text_is_no_conversion_but_code_of_the_project_is(tmp_path):
    converting = OPTS + textwrap.indent(textwrap.dedent("""\

        def convert(model):
            return torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        """), "    ")
    assert _project_norms(tmp_path / "code", converting) == []

"""``paratrain predict``: run a model trained by ``paratrain train`` on new inputs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MANUAL = """\
Load the task and model of a `paratrain train` run and print, for each input,
the text, the predicted label and its probability (as a fine-tuned classifier's predict script shows it).

  paratrain predict runs/text-cls "质量很好，物超所值" "太差了，再也不买"
  paratrain predict --file reviews.txt runs/text-cls       # one text per line
  echo "送货很快" | paratrain predict runs/text-cls -
  paratrain predict --json runs/text-cls "不错"             # one JSON object per input

Options go before CKPT (everything after it is an input). A run of your own task
(`paratrain train my_task.py:TASK`) imports that file again only with --trust-task-code
(a run folder from elsewhere could name any code), and only while it is unchanged.
CKPT is the run's --out directory (its best checkpoint is used, else the
latest), or one checkpoint inside it. The vocabulary or tokenizer saved with the
run encodes the inputs exactly as in training.
"""

RULE = "=" * 80


def register(subparsers) -> None:
    """Add the ``predict`` command."""
    parser = subparsers.add_parser(
        "predict",
        help="run a trained task model on inputs",
        description=MANUAL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage='paratrain predict [--json] [--file FILE] CKPT ["text" ... | -]',
    )
    parser.add_argument("checkpoint", metavar="CKPT", help="a paratrain train --out directory, or a checkpoint in it")
    parser.add_argument("inputs", nargs="*", metavar="TEXT", help="texts to classify; - reads standard input")
    parser.add_argument("--file", metavar="FILE", help="read inputs from FILE, one per line")
    parser.add_argument("--json", action="store_true", help="print one JSON object per input")
    parser.add_argument("--trust-task-code", action="store_true",
                        help="import the task file that the run's task.json names (your own task); without it, "
                             "predict names the file and refuses to run code from a run folder")
    parser.set_defaults(handler=handler)


def _read_inputs(args: argparse.Namespace) -> list[str]:
    """The inputs, each non-empty, from the arguments, standard input (``-``) and ``--file``.

    Raises:
        ConfigError: an empty text argument, an unreadable or empty ``--file``, or no inputs at all.
    """
    from paratrain.errors import ConfigError

    blank = [i for i, text in enumerate(args.inputs) if text != "-" and not text.strip()]
    if blank:
        raise ConfigError(f"input {blank[0] + 1} is empty; give the text to classify (a blank input has no prediction)")
    texts = [text for text in args.inputs if text != "-"]
    if "-" in args.inputs:
        texts += [line.strip() for line in sys.stdin if line.strip()]
    if args.file:
        try:
            lines = [line.strip() for line in Path(args.file).read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read --file {args.file} ({exc}); give a UTF-8 text file with one input per line") from None
        if not lines:
            raise ConfigError(f"--file {args.file} holds no text (every line is empty); give one input per line")
        texts += lines
    if not texts:
        raise ConfigError('no inputs; give texts after CKPT, --file FILE, or - to read standard input')
    return texts


def handler(args: argparse.Namespace) -> int:
    texts = _read_inputs(args)  # refused inputs answer before torch is imported
    from paratrain.loop.predictor import load_predictor

    predictor = load_predictor(args.checkpoint, trust_task_code=args.trust_task_code)
    print(f"model: {predictor.checkpoint}", file=sys.stderr, flush=True)
    for prediction in predictor.predict(texts):
        if args.json:
            print(json.dumps({"text": prediction.input, "label": prediction.label,
                              "probability": round(prediction.probability, 6), "scores": prediction.scores}, ensure_ascii=False))
        else:
            print(RULE)
            print(f"text:        {prediction.input}")
            print(f"label:       {prediction.label}")
            print(f"probability: {prediction.probability:.4f}")
    if not args.json:
        print(RULE)
    return 0

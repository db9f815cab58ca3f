"""The fit loop: ``pt.fit`` and the ``Trainer`` behind it, built only on the public layers.

    result = pt.fit("digits", epochs=5, out_dir="runs/digits")
    result = pt.fit(model, train_ds, dev_ds, epochs=3, callbacks=[MyCallback()])
"""

from paratrain.loop.callbacks import Callback
from paratrain.loop.config import FitConfig
from paratrain.loop.fit import fit
from paratrain.runtime.progress import epochs, progress
from paratrain.loop.result import FitResult
from paratrain.loop.state import FitState
from paratrain.loop.trainer import Trainer

__all__ = ["Callback", "FitConfig", "FitResult", "FitState", "Trainer", "epochs", "fit", "progress"]

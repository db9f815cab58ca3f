"""The loop the bench's test methods share: ``single``'s steps, with the model and optimizer each method
prepares its own way, then the final weights."""

from torch.utils.data import DataLoader


def train(wl, model, optimizer) -> None:
    """Every batch of the bench's data in order, one optimizer step each, recorded as ``single`` records them."""
    recorder = wl.recorder(0, 1)
    for batch in DataLoader(wl.train_set, batch_size=wl.batch_size(1), collate_fn=wl.task.collate):
        loss, _ = wl.task.forward(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        recorder.step(loss)
    recorder.finish(model.state_dict())

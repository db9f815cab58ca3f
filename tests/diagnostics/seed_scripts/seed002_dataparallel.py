"""The DataParallel-to-DDP conversion post rebuilt: the DataParallel project before its conversion (runs on CPU: python seed002_dataparallel.py)."""
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    torch.manual_seed(0)
    model = torch.nn.DataParallel(model)
    data = TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()

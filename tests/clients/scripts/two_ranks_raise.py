"""Two ranks of a plain script raise their own errors at the same moment."""

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
raise ValueError(f"bad input on rank {dist.get_rank()}")

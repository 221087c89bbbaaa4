"""shardload from Python: checkpoints, plans and rank tensors without copies (DLPack), the weight
server's client, engine hooks and a numerical check of sharded weights."""

__version__ = "0.1.0"

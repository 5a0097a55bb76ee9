"""The model, the dense reference, loading, sampling math."""

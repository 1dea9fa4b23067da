"""The trust model: hostile inputs, isolation, the gate, secrets, owned writes."""

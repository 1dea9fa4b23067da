"""The lock: reading and staleness (read), THE validator (schema), what a lock may ask (policy),
the validator's verdict by content hash (verdict), and resolution (resolve, sources, links,
indexes)."""

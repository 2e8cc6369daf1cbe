"""The pure core: event schema, state fold, manifests, config and the scheduler. No I/O, no clock, no randomness."""

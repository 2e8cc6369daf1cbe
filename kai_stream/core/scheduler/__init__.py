"""The pure scheduler: framework (session, hooks, statement), actions, plugins, fair share, and the cycle."""

"""The app's stacks: thin wrappers that wire constructs from ``pd_constructs`` together, and
the Stage that assembles them (``stage.py``)."""
